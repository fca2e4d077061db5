"""Each trial of ``det-lightning experiment`` gets the seed Determined's master would give it,
and is seeded with it: a model_def trial and a command script alike, through
``get_trial_seed()``, the generators ``init()`` seeds, and ``det.get_cluster_info()``.

The expected seed of a ``single`` experiment is the one the real master gave: its own records
(``master/test/olddata/pre_remove_steps.sql``) hold experiment 5, a ``single`` search with
``experiment_seed: 1673293593``, whose trial got seed 556896495."""

import json
import os
import pathlib
import re
from typing import Any, Dict, List

import numpy as np
import pytest

from det_lightning._runner.config import created_trials
from tests.integration.cli_support import PROJECT, output, run_cli

pytestmark = pytest.mark.slow

MASTER_EXPERIMENT_SEED, MASTER_TRIAL_SEED = 1673293593, 556896495

SEED_PROBE = """
import json
import os
import pathlib

import numpy as np
import torch

import determined as det
from model_def import RegressionTrial


class SeedProbe(RegressionTrial):
    def __init__(self, context):
        info = det.get_cluster_info()
        record = {
            "trial_seed": context.get_trial_seed(),
            "torch": torch.initial_seed(),
            "numpy": int(np.random.get_state()[1][0]),
            "info_seed": info.trial.trial_seed,
            "trial_id": info.trial.trial_id,
            "hparams": context.get_hparams(),
        }
        out = pathlib.Path(os.environ["TEST_RECORDS"]) / f"{info.trial.trial_id}.json"
        out.write_text(json.dumps(record))
        super().__init__(context)
"""

SEED_SCRIPT = """
import determined as det
from determined import pytorch

import seed_def

info = det.get_cluster_info()
with pytorch.init(hparams=info.trial.hparams) as context:
    trial = seed_def.SeedProbe(context)
    pytorch.Trainer(trial, context).fit(validation_period=pytorch.Batch(4))
"""

SPACE = {
    "global_batch_size": 8,
    "learning_rate": {"type": "double", "minval": 0.01, "maxval": 0.1},
    "hidden_size": {"type": "int", "minval": 2, "maxval": 6},
}


def _project(tmp: pathlib.Path) -> pathlib.Path:
    project = tmp / "project"
    project.mkdir()
    for name in ("model_def.py", "data.py"):
        (project / name).write_text((PROJECT / name).read_text())
    (project / "seed_def.py").write_text(SEED_PROBE)
    (project / "seed_train.py").write_text(SEED_SCRIPT)
    return project


def _run(
    tmp: pathlib.Path, entrypoint: str, hparams: Dict[str, Any], searcher: str, seed: str
) -> List[Dict[str, Any]]:
    project, records = _project(tmp), tmp / "records"
    records.mkdir()
    config = tmp / "seeds.yaml"
    config.write_text(
        f"name: seeds\nentrypoint: {entrypoint}\nhyperparameters: {json.dumps(hparams)}\n"
        f"searcher:\n  metric: validation_loss\n  max_length:\n    batches: 4\n{searcher}"
        f"min_validation_period:\n  batches: 4\n{seed}"
    )
    result = run_cli(
        "experiment", str(config), str(project), cwd=tmp, env={"TEST_RECORDS": str(records)}
    )
    assert result.returncode == 0, output(result)
    (tmp / "stderr.log").write_text(result.stderr)
    seen = [json.loads(p.read_text()) for p in records.glob("*.json")]
    for record in seen:  # the log line that starts each trial names its seed
        assert re.search(
            rf"trial {record['trial_id']} \(.*\}}, seed {record['trial_seed']}$",
            result.stderr,
            re.M,
        )
    return sorted(seen, key=lambda r: r["trial_id"])


def _seeded_with_its_own(record: Dict[str, Any]) -> bool:
    """``init()`` seeded torch and NumPy with the trial's seed, which cluster info also holds."""
    seed = record["trial_seed"]
    return record["torch"] == record["info_seed"] == seed and record["numpy"] == int(
        np.random.RandomState(seed).get_state()[1][0]
    )


@pytest.mark.parametrize("entrypoint", ["seed_def:SeedProbe", "python3 seed_train.py"])
def test_a_single_trial_gets_the_seed_determineds_master_gave_it(
    isolated_run: pathlib.Path, entrypoint: str
) -> None:
    hparams = {"global_batch_size": 8, "learning_rate": 0.05, "hidden_size": 4}
    seed = f"reproducibility:\n  experiment_seed: {MASTER_EXPERIMENT_SEED}\n"
    (record,) = _run(isolated_run, entrypoint, hparams, "  name: single\n", seed)
    assert record["trial_seed"] == MASTER_TRIAL_SEED
    assert _seeded_with_its_own(record), record


def test_random_trials_get_the_masters_points_and_seeds(isolated_run: pathlib.Path) -> None:
    searcher = "  name: random\n  max_trials: 3\n"
    seen = _run(
        isolated_run,
        "seed_def:SeedProbe",
        SPACE,
        searcher,
        "reproducibility:\n  experiment_seed: 5\n",
    )
    made = created_trials(SPACE, 3, 5)
    assert [r["hparams"] for r in seen] == [m.hparams for m in made]
    assert [r["trial_seed"] for r in seen] == [m.trial_seed for m in made]
    assert all(_seeded_with_its_own(r) for r in seen), seen


def test_without_an_experiment_seed_one_is_drawn_recorded_and_shown(
    isolated_run: pathlib.Path,
) -> None:
    """Determined's master picks an experiment seed when none is given and keeps it in the
    experiment's config. Here the search draws one when it begins, logs it, records it
    (``experiment describe`` shows it), and its trials get the master's points and seeds
    for it: setting it in the config repeats them."""
    searcher = "  name: random\n  max_trials: 2\n"
    seen = _run(isolated_run, "python3 seed_train.py", SPACE, searcher, "")
    log = (isolated_run / "stderr.log").read_text()
    (drawn,) = {
        int(s) for s in re.findall(r"experiment seed (\d+), drawn when the experiment began", log)
    }
    made = created_trials(SPACE, 2, drawn)
    assert [r["trial_seed"] for r in seen] == [m.trial_seed for m in made]
    assert [r["hparams"] for r in seen] == [m.hparams for m in made]
    assert all(_seeded_with_its_own(r) for r in seen), seen
    (record,) = pathlib.Path(os.environ["DET_LIGHTNING_CHECKPOINT_DIR"]).glob("*/experiment.json")
    described = run_cli("experiment", "describe", record.parent.name, cwd=isolated_run)
    assert described.returncode == 0, output(described)
    assert f"; experiment seed {drawn} (drawn); " in described.stdout, described.stdout
