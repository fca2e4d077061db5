"""Leases: a trial whose worker is gone is taken over, on any machine, and resumed from its
checkpoint; the search never waits forever and never trains a trial twice.

"Machines" are worker processes with different ``DET_LIGHTNING_HOST_ID``s sharing the
search's journal file and checkpoint directory (``test_search_postgres.py`` and the object
store tests do the same with a database and a bucket).
"""

import json
import os
import pathlib
import re
import signal
import time

import optuna
import pytest

from det_lightning._runner._lease import CONTINUES, HOST_ID_ENV, is_superseded
from tests.fixtures.object_store import S3
from tests.integration.cli_support import experiment_dir
from tests.integration.search_support import (
    check_search,
    checkpoint_steps,
    experiment_of,
    journal_of,
    number_of,
    read_trials,
    slow_config,
    slow_project,  # noqa: F401 (a fixture)
    start_search,
)
from tests.integration.test_search import RANDOM_SEARCHER

pytestmark = pytest.mark.slow

HEARTBEAT = ["--heartbeat-timeout", "4"]


def _held(workdir: pathlib.Path, name: str, batch: int) -> "dict[str, str]":
    """A worker's environment that holds its first trial at ``batch`` (checkpointed there)."""
    return {
        "TEST_HOLD_AT_BATCH": str(batch),
        "TEST_HOLD_MARKER": str(workdir / name),
        HOST_ID_ENV: name,
    }


def _wait_for(path: pathlib.Path, process: "object", timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[0]  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_a_trial_of_a_machine_that_never_returns_is_taken_over_by_the_other(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    # Machine B's trials start once A's first trial is held at batch 4 (past rung 1, with its
    # checkpoint there): A's trial is the first at each rung, so ASHA never stops it before.
    doomed = start_search(
        isolated_run, slow_project, *HEARTBEAT, env=_held(isolated_run, "machine-a", 4)
    )
    survivor = start_search(
        isolated_run,
        slow_project,
        *HEARTBEAT,
        env={"TEST_WAIT_FOR": str(isolated_run / "machine-a"), HOST_ID_ENV: "machine-b"},
    )
    _wait_for(isolated_run / "machine-a", doomed)
    os.killpg(doomed.pid, signal.SIGKILL)  # machine A is gone for good
    doomed.communicate(timeout=60)
    out = survivor.communicate(timeout=400)[0]
    assert survivor.returncode == 0, out

    trials = read_trials(journal_of(checkpoint_dir))
    check_search(checkpoint_dir, trials, replay=False)  # every trial once, to its last rung
    (taken,) = [t for t in trials if CONTINUES in t.user_attrs]
    number = taken.user_attrs["trial_number"]
    assert f"trial {number} (bracket 0, rungs at [2, 4, 8] batches) resumed" in out, out
    resumed_from = re.search(rf"resuming from (\S*trial-{number}/\S+) at batch (\d+)", out)
    assert resumed_from and int(resumed_from.group(2)) == 4, out  # from its checkpoint
    assert "still running" not in out


def test_a_trial_killed_between_ask_and_lease_is_not_left_running_forever(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path, slow_project: pathlib.Path
) -> None:
    """The worker died right after study.ask(): no lease, no hyperparameters' owner. A rerun
    on another machine takes the trial over once its heartbeat timeout has passed."""
    slow_config(slow_project, RANDOM_SEARCHER)
    from det_lightning._runner._record import write_experiment_record
    from det_lightning._runner._search_settings import SearchSettings, experiment_id
    from det_lightning._runner.config import load_config
    from det_lightning._runner.plan import plan_experiment
    from det_lightning._runner.search._storage import open_studies

    config = load_config(str(slow_project / "asha.yaml"))
    journal = checkpoint_dir / experiment_id(config.as_given) / "search.journal"
    # As a worker does, the experiment's record first, then its study.
    write_experiment_record(plan_experiment(config, str(slow_project), {}, str(checkpoint_dir)))
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))
    )
    settings = SearchSettings.from_upfront(config.searcher, config.raw["hyperparameters"])
    (study,) = open_studies(
        storage,
        experiment_id(config.as_given),
        settings,
        seed=config.reproducibility_config.experiment_seed,
    )
    orphan = study.ask()  # what a worker killed at that moment leaves behind
    rerun = start_search(isolated_run, slow_project, *HEARTBEAT, env={HOST_ID_ENV: "machine-b"})
    out = rerun.communicate(timeout=400)[0]
    assert rerun.returncode == 0, out
    trials = read_trials(journal)
    assert len(trials) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    (before,) = [
        t
        for t in optuna.load_study(study_name=study.study_name, storage=storage).get_trials()
        if t._trial_id == orphan._trial_id
    ]
    assert is_superseded(before)
    assert "still running" not in out
    for trial in trials:
        newest = max(
            p
            for p in (experiment_of(checkpoint_dir) / f"trial-{number_of(trial)}").iterdir()
            if not p.name.startswith(".")
        )
        assert checkpoint_steps(newest) == 8


UNITS = [2, 4, 8]  # asha.yaml's rungs, in batches


def test_the_drill_two_machines_share_only_a_database_and_a_bucket(
    postgres_url: str, s3_server: S3, tmp_path: pathlib.Path, slow_project: pathlib.Path
) -> None:
    """Issue 19's drill: machine A trains a trial, checkpoints it into the bucket and dies
    (SIGKILL, never restarted); machine B, sharing nothing with A but the PostgreSQL database
    and the bucket (its own working and cache directories), takes the trial over once A's
    lease expires, resumes it from A's checkpoint in the bucket, and finishes the search."""
    shared = ["--storage", postgres_url, "--checkpoint-dir", s3_server.url("search"), *HEARTBEAT]
    work = {name: tmp_path / name for name in ("machine-a", "machine-b")}
    for directory in work.values():
        directory.mkdir()
    held = tmp_path / "machine-a-held"
    doomed = start_search(
        work["machine-a"],
        slow_project,
        *shared,
        env={
            "TEST_HOLD_AT_BATCH": "4",
            "TEST_HOLD_MARKER": str(held),
            HOST_ID_ENV: "machine-a",
            "DET_LIGHTNING_CACHE_DIR": str(work["machine-a"] / "cache"),
        },
    )
    survivor = start_search(
        work["machine-b"],
        slow_project,
        *shared,
        env={
            "TEST_WAIT_FOR": str(held),
            HOST_ID_ENV: "machine-b",
            "DET_LIGHTNING_CACHE_DIR": str(work["machine-b"] / "cache"),
        },
    )
    _wait_for(held, doomed)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.communicate(timeout=60)
    out = survivor.communicate(timeout=600)[0]
    assert survivor.returncode == 0, out

    trials = read_trials(postgres_url, checkpoint_dir=tmp_path / "no-local-checkpoints")
    assert len(trials) == 6 and len({number_of(t) for t in trials}) == 6, out
    (taken,) = [t for t in trials if CONTINUES in t.user_attrs]
    number = number_of(taken)
    resumed = re.search(
        rf"checkpoints go to (\S+/trial-{number});.* resuming from .* at batch "
        r"(\d+)",
        out,
    )
    search = experiment_dir(pathlib.Path("search"), slow_project / "asha.yaml").as_posix()
    assert resumed and resumed.group(1) == s3_server.url(f"{search}/trial-{number}"), out
    assert int(resumed.group(2)) == 4, out  # A's checkpoint, downloaded from the bucket
    for trial in trials:  # each trained to the last rung it reached, its checkpoint in the bucket
        rungs = trial.user_attrs["rungs"]
        expected = (
            optuna.trial.TrialState.COMPLETE if len(rungs) == 3 else optuna.trial.TrialState.PRUNED
        )
        assert trial.state == expected and max(trial.intermediate_values) == UNITS[len(rungs) - 1]
        prefix = f"{search}/trial-{number_of(trial)}"
        markers = [k for k in s3_server.keys(prefix) if k.endswith("/.complete")]
        steps = [
            json.loads(s3_server.fs.cat(f"{s3_server.bucket}/{prefix}/{k}"))["steps_completed"]
            for k in markers
        ]
        assert max(steps) == UNITS[len(rungs) - 1], (number_of(trial), steps)
    assert not (work["machine-b"] / "checkpoints").exists()  # nothing on B's disk but its cache
