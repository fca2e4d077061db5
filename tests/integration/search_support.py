"""What the search tests share: the slow fixture project, starting and killing searches, and
reading a search back from its Optuna storage (a journal file or a database URL)."""

import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Union

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from det_lightning._runner._lease import CONTINUES, is_superseded, trial_number
from det_lightning._runner.search._reporter import SURPLUS
from tests.fixtures import warm
from tests.integration.cli_support import PROJECT

UNITS = [2, 4, 8]

SLOW_TRIAL = """
import os
import pathlib
import time

from model_def import RegressionTrial


def wait_for(condition, what):
    deadline = time.monotonic() + 180  # generous: a busy machine starts workers slowly
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("waited 180 s for " + what)
        time.sleep(0.02)


class SlowTrial(RegressionTrial):
    def __init__(self, context):
        if os.environ.get("TEST_HOLD_AT_BATCH"):
            # Held at a batch, the trial must have its checkpoints up to there complete: written
            # in the training thread, not still in flight in the background when the test kills.
            os.environ["DET_LIGHTNING_SYNC_CHECKPOINTS"] = "1"
        super().__init__(context)

    def train_batch(self, batch, epoch_idx, batch_idx):
        barrier = os.environ.get("TEST_BARRIER_DIR")
        if barrier and batch_idx == 0:
            # Each worker's first trial waits here until every worker has one, so the test
            # knows all workers train, however slowly each one starts.
            directory = pathlib.Path(barrier)
            (directory / str(os.getpid())).touch()
            count = int(os.environ["TEST_BARRIER_COUNT"])
            wait_for(lambda: len(list(directory.iterdir())) >= count, "the other workers")
        after = os.environ.get("TEST_WAIT_FOR")
        if after and batch_idx == 0:  # starts once another worker's trial is held
            wait_for(pathlib.Path(after).exists, after)
        hold = os.environ.get("TEST_HOLD_AT_BATCH")
        if hold and batch_idx == int(hold):
            # Checkpointed up to here: the test kills the search now.
            pathlib.Path(os.environ["TEST_HOLD_MARKER"]).touch()
            wait_for(lambda: False, "the test to kill this process")
        time.sleep(0.05)  # a trial takes a while; the barrier, not this, makes workers overlap
        return super().train_batch(batch, epoch_idx, batch_idx)
"""


@pytest.fixture
def slow_project(tmp_path: pathlib.Path) -> pathlib.Path:
    """The fixture project plus a trial that takes 0.05 s a batch and checkpoints every 2;
    ``TEST_BARRIER_*``, ``TEST_WAIT_FOR`` and ``TEST_HOLD_*`` in its environment make it wait
    for events."""
    project = tmp_path / "slow_project"
    project.mkdir()
    for name in ("model_def.py", "data.py"):
        (project / name).write_text((PROJECT / name).read_text())
    (project / "slow_def.py").write_text(SLOW_TRIAL)
    config = (
        (PROJECT / "asha.yaml")
        .read_text()
        .replace("model_def:RegressionTrial", "slow_def:SlowTrial")
    )
    (project / "asha.yaml").write_text(config + "min_checkpoint_period:\n  batches: 2\n")
    return project


def read_trials(
    storage: Union[pathlib.Path, str], checkpoint_dir: Optional[pathlib.Path] = None
) -> List[optuna.trial.FrozenTrial]:
    """The search's trials in ``storage`` (a journal file, or a database URL), oldest first,
    without the surplus ones (asked for by a worker after another filled the budget), which
    are checked to have never run (no ``trial-<n>`` in ``checkpoint_dir``, by default the
    journal's folder)."""
    if isinstance(storage, pathlib.Path):
        checkpoint_dir = checkpoint_dir or storage.parent
        found = _all_trials(JournalStorage(JournalFileBackend(str(storage))))
    else:
        database = optuna.storages.RDBStorage(storage)
        try:
            found = _all_trials(database)
        finally:
            database.engine.dispose()  # closes its pooled connections now, not in the GC
    assert checkpoint_dir is not None, "a database URL needs the checkpoint folder"
    for trial in found:
        if trial.user_attrs.get(SURPLUS):
            assert trial.state == optuna.trial.TrialState.FAIL and "hparams" not in trial.user_attrs
        if is_superseded(trial):  # taken over: exactly one continuation carries it on
            assert len([t for t in found if t.user_attrs.get(CONTINUES) == trial._trial_id]) == 1
    found = [t for t in found if not t.user_attrs.get(SURPLUS) and not is_superseded(t)]
    # A surplus trial never gets a directory: every trial-<n> is a real trial's. (Its number
    # cannot show it: a surplus trial's is the next real trial's, numbers run on without gaps.)
    if checkpoint_dir.is_dir():  # not for checkpoints in a bucket
        numbers = {f"trial-{trial_number(t)}" for t in found}
        experiment = experiment_of(checkpoint_dir)
        made = {p.name for p in experiment.iterdir() if p.name.startswith("trial-")}
        assert made <= numbers, (made, numbers)
    return sorted(found, key=lambda t: t.datetime_start)


def number_of(trial: optuna.trial.FrozenTrial) -> int:
    """The experiment's trial number (a continuation keeps the one of the trial it took over)."""
    return trial_number(trial)


def _all_trials(storage: Any) -> List[optuna.trial.FrozenTrial]:
    found: List[optuna.trial.FrozenTrial] = []
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        found.extend(study.get_trials(deepcopy=False))
    return found


def checkpoint_steps(checkpoint: pathlib.Path) -> int:
    import json

    return int(json.loads((checkpoint / "metadata.json").read_text())["steps_completed"])


def check_search(
    checkpoint_dir: pathlib.Path, trials: List[optuna.trial.FrozenTrial], replay: bool = True
) -> None:
    """Six trials, each run once to its end, trained exactly to the last rung it reached;
    with ``replay`` (one worker: trials arrive in order), each stopped exactly where
    Determined's rule, replayed on the recorded rung metrics, stops it."""
    assert len(trials) == 6
    rungs: List[List[float]] = [[], [], []]
    for trial in trials:
        recorded: Dict[str, float] = trial.user_attrs["rungs"]
        if not replay:
            rungs = [[], [], []]  # a trial's own rungs only: the order across workers is unknown
        stop_rung = None
        for index in range(3):
            value = recorded.get(str(index))
            if value is None:
                break
            ranked_out = (
                replay
                and index < 2
                and not sum(1 for v in rungs[index] if v < value)
                < max(int((len(rungs[index]) + 1) / 2), 1)
            )
            rungs[index].append(value)
            if ranked_out or index == 2 or (not replay and str(index + 1) not in recorded):
                stop_rung = index
                break
        assert stop_rung is not None and stop_rung == len(recorded) - 1, (trial.number, recorded)
        expected_state = (
            optuna.trial.TrialState.COMPLETE if stop_rung == 2 else optuna.trial.TrialState.PRUNED
        )
        assert trial.state == expected_state, (trial.number, recorded)
        number = number_of(trial)
        newest = max(
            (
                p
                for p in (experiment_of(checkpoint_dir) / f"trial-{number}").iterdir()
                if not p.name.startswith(".")
            ),
            key=checkpoint_steps,
        )
        assert checkpoint_steps(newest) == UNITS[stop_rung]  # trained exactly to its last rung
    assert any(t.state == optuna.trial.TrialState.PRUNED for t in trials)


def start_search(
    workdir: pathlib.Path, project: pathlib.Path, *extra: str, env: Optional[Dict[str, str]] = None
) -> subprocess.Popen:
    return warm.Popen(
        [
            sys.executable,
            "-m",
            "det_lightning",
            "experiment",
            *extra,
            str(project / "asha.yaml"),
            str(project),
        ],
        cwd=workdir,
        env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
    )


def barrier(workdir: pathlib.Path, workers: int) -> Dict[str, str]:
    """The environment that makes each worker's first trial wait for the other workers'."""
    directory = workdir / f"barrier-{len(list(workdir.glob('barrier-*')))}"
    directory.mkdir()
    return {"TEST_BARRIER_DIR": str(directory), "TEST_BARRIER_COUNT": str(workers)}


def start_and_kill_at_batch(
    workdir: pathlib.Path, project: pathlib.Path, batch: int, *extra: str
) -> None:
    """Starts the search (``extra``: more command-line options), and kills its process group
    with SIGKILL once its first trial is held at ``batch`` (its checkpoint of ``batch``
    batches complete)."""
    marker = workdir / "held"
    process = start_search(
        workdir,
        project,
        *extra,
        env={"TEST_HOLD_AT_BATCH": str(batch), "TEST_HOLD_MARKER": str(marker)},
    )
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert process.poll() is None, f"the search ended first:\n{process.communicate()[0]}"
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError(f"not held at batch {batch}:\n{process.communicate()[0]}")
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)


GRID = str(PROJECT / "search.yaml")
# search.yaml: hidden_size [2, 8] x learning_rate 10**[-3, -1], in name order, the first
# varying slowest; Determined creates the last point's trial first (grid.go).
GRID_ORDER = [(8, 0.1), (8, 0.001), (2, 0.1), (2, 0.001)]


def grid_points(trials: List[optuna.trial.FrozenTrial]) -> List[tuple]:
    by_number = sorted(trials, key=lambda t: t._trial_id)
    return [
        (t.user_attrs["hparams"]["hidden_size"], round(t.user_attrs["hparams"]["learning_rate"], 6))
        for t in by_number
    ]


def slow_config(project: pathlib.Path, searcher: str, space: str = "") -> None:
    """The slow project's config with another searcher section (and hyperparameters)."""
    head, _ = (project / "asha.yaml").read_text().split("searcher:")
    if space:
        head = head.split("hyperparameters:")[0] + space
    (project / "asha.yaml").write_text(
        head + searcher + "min_validation_period:\n  batches: 4\nmin_checkpoint_period:\n"
        "  batches: 2\nreproducibility:\n  experiment_seed: 7\n"
    )


def slow_grid_config(project: pathlib.Path) -> None:
    """The slow project with the fixture project's grid (``search.yaml``: ``GRID_ORDER``)."""
    grid = (PROJECT / "search.yaml").read_text()
    space = "hyperparameters:" + grid.split("hyperparameters:")[1].split("searcher:")[0]
    slow_config(project, "searcher:" + grid.split("searcher:")[1].split("min_")[0], space)


def experiment_of(checkpoint_dir: pathlib.Path) -> pathlib.Path:
    """The folder of the one experiment under ``checkpoint_dir`` (``<id>/``, holding its
    ``experiment.json``); ``checkpoint_dir`` itself when it is that folder."""
    if (checkpoint_dir / "experiment.json").exists():
        return checkpoint_dir
    (found,) = [p.parent for p in checkpoint_dir.glob("*/experiment.json")]
    return found


def journal_of(checkpoint_dir: pathlib.Path) -> pathlib.Path:
    """The search journal of the one experiment under ``checkpoint_dir``."""
    return experiment_of(checkpoint_dir) / "search.journal"


def wait_while_running(condition: Any, process: "subprocess.Popen[Any]", what: str) -> None:
    """Polls ``condition`` until it holds; fails if ``process`` ends first or 240 s pass."""
    deadline = time.monotonic() + 240
    while not condition():
        assert process.poll() is None, f"the search ended first:\n{process.communicate()[0]}"
        assert time.monotonic() < deadline, f"waited 240 s for {what}"
        time.sleep(0.05)


def eventually(condition: Any, what: str, timeout: float = 240) -> None:
    """Polls ``condition`` until it holds; fails once ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.05)
