"""``determined.experimental.client`` over finished experiments: the post-training code of
Determined's docs (``get_experiment(id).list_checkpoints()[0].download()``, ``get_trial``,
``top_checkpoint``, ``create_experiment(...).wait()``) reads what ``det-lightning experiment``
left under the checkpoint directory.

One grid search of the fixture project (4 trials) is run once for the module; the tests that
change checkpoints work on a copy of its folder.
"""

import json
import os
import pathlib
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
import yaml

from det_lightning import errors
from det_lightning.experimental import client
from det_lightning.pytorch import _checkpoint as ckpt
from tests.fixtures.object_store import S3
from tests.integration.cli_support import PROJECT, load_checkpoint, output, run_cli

pytestmark = pytest.mark.slow


def _project(where: pathlib.Path) -> pathlib.Path:
    project = where / "project"
    shutil.copytree(PROJECT, project)
    return project


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Any]]:
    """The grid search's checkpoint directory, its experiment id, and what its summary said."""
    base = tmp_path_factory.mktemp("client")
    project, root = _project(base), base / "checkpoints"
    result = run_cli("experiment", "search.yaml", ".", "--checkpoint-dir", str(root), cwd=project)
    assert result.returncode == 0, output(result)
    (experiment_id,) = [p.name for p in root.iterdir()]
    yield {"root": root, "id": experiment_id, "project": project, "summary": result.stdout}


def _client(root: pathlib.Path) -> client.Determined:
    return client.Determined(checkpoint_dir=str(root))


def _on_disk(root: pathlib.Path, experiment_id: str) -> List[Dict[str, Any]]:
    """Every checkpoint's trial, uuid and searcher metric, read straight from the files."""
    found = []
    for trial in sorted((root / experiment_id).glob("trial-*")):
        for entry in ckpt.list_local(trial):
            validation = entry.metadata["det_lightning_validation"]
            number = int(trial.name.split("-")[1])
            found.append({"trial": number, "uuid": entry.name, "value": validation["value"]})
    return found


def test_the_experiment_and_its_trials(searched: Dict[str, Any]) -> None:
    determined = _client(searched["root"])
    (listed,) = determined.list_experiments()
    experiment = determined.get_experiment(searched["id"])
    assert listed.id == experiment.id == searched["id"]
    assert experiment.name == "regression-grid"
    assert experiment.state is client.ExperimentState.COMPLETED
    assert experiment.progress == 1.0
    config = yaml.safe_load((searched["project"] / "search.yaml").read_text())
    assert experiment.config["searcher"].items() >= config["searcher"].items()

    trials = experiment.list_trials()
    assert [t.id for t in trials] == [1, 2, 3, 4]
    assert {t.state for t in trials} == {client.TrialState.COMPLETED}
    points = {(t.hparams["learning_rate"], t.hparams["hidden_size"]) for t in trials}
    assert points == {(0.1, 8), (0.001, 8), (0.1, 2), (0.001, 2)}  # the grid's 4 points
    best = {t.id: t.summary_metrics["validation_metrics"]["validation_loss"]["min"] for t in trials}
    for t in trials:  # each validation the search kept: at 4 and 8 batches
        history = list(t.iter_metrics("validation"))
        assert [m.steps_completed for m in history] == [4, 8]
        assert min(m.metrics["validation_loss"] for m in history) == best[t.id]
        assert {m.group for m in history} == {"validation"}
    with pytest.raises(NotImplementedError, match="TensorBoard"):
        list(trials[0].iter_metrics("training"))
    ids = [f"{searched['id']}/1", f"{searched['id']}/2"]
    both = list(determined.iter_trials_metrics(ids, "validation"))
    assert [(m.trial_id, m.steps_completed) for m in both] == [(1, 4), (1, 8), (2, 4), (2, 8)]
    ranked = experiment.list_trials(sort_by=client.TrialSortBy.BEST_VALIDATION_METRIC)
    assert [t.id for t in ranked] == sorted(best, key=best.__getitem__)
    # The trial the summary calls best is the one the client ranks first.
    assert f"best: trial {ranked[0].id} " in searched["summary"]
    trial = determined.get_trial(f"{searched['id']}/{ranked[0].id}")
    assert trial.hparams == ranked[0].hparams and trial.get_experiment().id == searched["id"]


def test_checkpoints_sort_by_the_searcher_metric_best_first(searched: Dict[str, Any]) -> None:
    experiment = _client(searched["root"]).get_experiment(searched["id"])
    disk = _on_disk(searched["root"], searched["id"])
    checkpoints = experiment.list_checkpoints()
    assert len(checkpoints) == len(disk) >= 4
    by_value = sorted(disk, key=lambda c: c["value"])  # validation_loss: smaller is better
    assert [c.uuid for c in checkpoints] == [c["uuid"] for c in by_value]
    first = checkpoints[0]
    assert first.state is client.CheckpointState.COMPLETED
    assert first.training.experiment_id == searched["id"]
    assert first.training.trial_id == by_value[0]["trial"]
    metrics = first.training.validation_metrics["avgMetrics"]
    assert metrics["validation_loss"] == by_value[0]["value"]
    assert metrics["batches"] == first.metadata["steps_completed"]  # every metric reported
    assert [c.uuid for c in experiment.list_checkpoints(max_results=1)] == [first.uuid]
    worst_first = experiment.list_checkpoints(
        sort_by="validation_loss", order_by=client.OrderBy.DESC
    )
    assert [c.uuid for c in worst_first] == [c["uuid"] for c in reversed(by_value)]
    with pytest.warns(FutureWarning, match="list_checkpoints"):
        assert experiment.top_checkpoint().uuid == first.uuid
    with pytest.warns(FutureWarning):
        top = experiment.top_n_checkpoints(2)
    assert [c.training.trial_id for c in top] == [c["trial"] for c in by_value[:2]]
    with pytest.raises(AssertionError, match="both set, or neither"):
        experiment.list_checkpoints(sort_by="validation_loss")


def test_a_trials_checkpoints(searched: Dict[str, Any]) -> None:
    determined = _client(searched["root"])
    trial = determined.get_trial(f"{searched['id']}/trial-3")
    mine = [c for c in _on_disk(searched["root"], searched["id"]) if c["trial"] == 3]
    assert [c.uuid for c in trial.list_checkpoints()] == [c["uuid"] for c in mine]
    with pytest.warns(FutureWarning):
        latest = trial.select_checkpoint(latest=True)
    assert latest.metadata["steps_completed"] == 8  # max_length: 8 batches
    with pytest.warns(FutureWarning):
        assert trial.select_checkpoint(uuid=latest.uuid).uuid == latest.uuid
    with pytest.warns(FutureWarning), pytest.raises(AssertionError, match="Exactly one"):
        trial.select_checkpoint(latest=True, best=True)


def test_download_gives_a_directory_the_trial_loads_from(
    searched: Dict[str, Any], tmp_path: pathlib.Path
) -> None:
    experiment = _client(searched["root"]).get_experiment(searched["id"])
    best = experiment.list_checkpoints(max_results=1)[0]
    # On this machine already: its own directory, nothing copied.
    assert (
        pathlib.Path(best.download())
        == searched["root"] / searched["id"] / (f"trial-{best.training.trial_id}") / best.uuid
    )
    target = tmp_path / "models" / "best"
    assert best.download(str(target)) == str(target)
    assert ckpt.is_complete(target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["best"]  # no partial copy left
    loaded = load_checkpoint(target, "trial_class", cwd=searched["project"])
    assert loaded["max_weight_difference"] == 0.0
    assert loaded["hparams"] == best.training.hparams
    # A directory that holds a checkpoint already is left as it is, as Determined's.
    (target / "state_dict.pth").write_bytes(b"mine")
    best.download(str(target))
    assert (target / "state_dict.pth").read_bytes() == b"mine"


def test_unknown_ids_name_what_is_there(searched: Dict[str, Any], tmp_path: pathlib.Path) -> None:
    determined = _client(searched["root"])
    with pytest.raises(client.ExperimentNotFound, match=f"names, not numbers.*{searched['id']}"):
        determined.get_experiment(3)
    with pytest.raises(client.TrialNotFound, match="has no trial 9 .*1, 2, 3, 4"):
        determined.get_trial(f"{searched['id']}/9")
    with pytest.raises(errors.CheckpointNotFound, match="no checkpoint nope under"):
        determined.get_checkpoint("nope")
    with pytest.raises(ValueError, match="<experiment id>/<trial number>"):
        determined.get_trial("three")
    # A trial number alone is enough while one experiment has such a trial; not with two.
    assert determined.get_trial(2).experiment_id == searched["id"]
    root = tmp_path / "two"
    shutil.copytree(searched["root"], root)
    other = root / "regression-grid-0000000000"
    shutil.copytree(root / searched["id"], other)
    record = json.loads((other / "experiment.json").read_text())
    (other / "experiment.json").write_text(json.dumps({**record, "id": other.name}))
    with pytest.raises(client.TrialNotFound, match="2 experiments .* have a trial 2"):
        _client(root).get_trial(2)


def _tree(root: pathlib.Path) -> Dict[str, Any]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


def test_reading_an_experiment_writes_nothing(
    searched: Dict[str, Any], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """The client and ``experiment list``/``describe`` only read: a folder the reader cannot
    write reads as well (as root, permissions cannot show it: every file is left as it was).
    Without its journal an experiment reads as one with no trials, and none is made."""
    from det_lightning._runner import cli
    from det_lightning._runner.search._storage import JOURNAL_NAME

    root = tmp_path / "checkpoints"
    shutil.copytree(searched["root"], root)
    before = _tree(root)
    experiment = _client(root).get_experiment(searched["id"])
    assert (
        experiment.state is client.ExperimentState.COMPLETED and len(experiment.list_trials()) == 4
    )
    assert [e.id for e in _client(root).list_experiments()] == [searched["id"]]
    assert cli.main(["experiment", "list", "--checkpoint-dir", str(root)]) == 0
    assert cli.main(["experiment", "describe", searched["id"], "--checkpoint-dir", str(root)]) == 0
    assert "COMPLETED" in capsys.readouterr().out
    assert _tree(root) == before

    (journal,) = root.rglob(JOURNAL_NAME)
    journal.unlink()
    experiment.reload()
    assert experiment.state is client.ExperimentState.PAUSED and experiment.list_trials() == []
    assert not journal.exists()


def test_delete_removes_the_experiment_and_what_it_wrote(
    searched: Dict[str, Any], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """Its folder (checkpoints, the search's journal, its record) at once, its TensorBoard
    files; another experiment beside it stays until deleted, and one whose record does not
    say where its TensorBoard files are is deleted all the same, saying so."""
    root = tmp_path / "checkpoints"
    shutil.copytree(searched["root"], root)
    old = root / "regression-grid-0000000000"  # begun before records named TensorBoard's
    shutil.copytree(root / searched["id"], old)
    record = json.loads((old / "experiment.json").read_text())
    (old / "experiment.json").write_text(
        json.dumps({**{k: v for k, v in record.items() if k != "tensorboard_dir"}, "id": old.name})
    )
    tensorboard = tmp_path / "tensorboard" / searched["id"]
    shutil.copytree(record["tensorboard_dir"], tensorboard)
    (root / searched["id"] / "experiment.json").write_text(
        json.dumps({**record, "tensorboard_dir": str(tensorboard)})
    )

    copy = _client(root).get_experiment(old.name)
    assert copy.state is client.ExperimentState.COMPLETED
    with pytest.raises(FileNotFoundError, match=f"by default tensorboard/{old.name}"):
        copy.delete_tensorboard_files()
    capsys.readouterr()
    copy.delete()
    assert "TensorBoard files" in capsys.readouterr().err
    assert sorted(p.name for p in root.iterdir()) == [searched["id"]]

    experiment = _client(root).get_experiment(searched["id"])
    assert experiment.state is client.ExperimentState.COMPLETED
    checkpoint = experiment.list_checkpoints()[0]
    experiment.delete()
    assert experiment.state is client.ExperimentState.DELETED
    assert list(root.iterdir()) == []  # nothing hidden left
    assert not tensorboard.exists() and tensorboard.parent.exists()
    with pytest.raises(client.ExperimentNotFound):
        _client(root).get_experiment(searched["id"])
    with pytest.raises(errors.CheckpointNotFound):
        _client(root).get_checkpoint(checkpoint.uuid)
    assert _client(root).list_experiments() == []


def _on_a_terminal(args: List[str], answer: str) -> Tuple[int, str]:
    """``python -m det_lightning *args`` on a pseudo-terminal, ``answer`` typed ahead; its
    exit status and what it showed."""
    master, slave = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "det_lightning", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    os.write(master, answer.encode())
    shown = bytearray()
    try:
        while select.select([master], [], [], 300)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not data:
                break
            shown += data
    finally:
        os.close(master)
    return process.wait(timeout=300), shown.decode(errors="replace")


def test_cancel_and_delete_from_the_shell(
    searched: Dict[str, Any], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """``det-lightning experiment cancel|delete ID``, as Determined's ``det experiment``:
    delete asks on a terminal (no: nothing is deleted) and needs --yes without one."""
    from det_lightning._runner import cli

    root = tmp_path / "checkpoints"
    shutil.copytree(searched["root"], root)
    where = ["--checkpoint-dir", str(root)]
    from det_lightning.experimental._commands import ACTIONS

    assert ACTIONS == cli.EXPERIMENT_ACTIONS  # what the command line sends to the client
    for action in ("pause", "cancel", "activate"):  # completed: it stays so, nothing starts
        assert cli.main(["experiment", action, searched["id"], *where]) == 0
        assert capsys.readouterr().out == f"experiment {searched['id']}: COMPLETED\n"
    assert cli.main(["experiment", "delete", "nope", *where]) == 1
    assert "no experiment 'nope'" in capsys.readouterr().err
    assert cli.main(["experiment", "delete", searched["id"], *where]) == 1  # no terminal here
    assert "pass --yes" in capsys.readouterr().err and (root / searched["id"]).is_dir()

    for answer in ("n\n", "\x04"):  # no, and Ctrl+D: nothing is deleted
        status, shown = _on_a_terminal(["experiment", "delete", searched["id"], *where], answer)
        assert status == 1 and "Delete it? [y/N]" in shown and "not deleted" in shown, shown
        assert "Traceback" not in shown and (root / searched["id"] / "experiment.json").is_file()
    status, shown = _on_a_terminal(["experiment", "delete", searched["id"], *where], "y\n")
    assert status == 0 and f"experiment {searched['id']}: DELETED" in shown, shown
    assert list(root.iterdir()) == []


def test_a_checkpoints_metadata_changes_and_deletion(
    searched: Dict[str, Any], tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "checkpoints"
    shutil.copytree(searched["root"], root)
    determined = _client(root)
    checkpoint = determined.get_experiment(searched["id"]).list_checkpoints()[-1]
    with pytest.raises(ValueError, match="steps_completed are written with the checkpoint"):
        checkpoint.add_metadata({"stage": "production", "steps_completed": 1})
    checkpoint.add_metadata({"stage": "production"})
    path = pathlib.Path(checkpoint.download())
    written = json.loads((path / "metadata.json").read_text())
    assert written["stage"] == "production" and "det_lightning_run" in written
    assert determined.get_checkpoint(checkpoint.uuid).metadata["stage"] == "production"
    checkpoint.remove_metadata(["stage"])
    assert "stage" not in json.loads((path / "metadata.json").read_text())
    with pytest.raises(ValueError, match="det_lightning_run are written with the checkpoint"):
        checkpoint.remove_metadata(["det_lightning_run"])
    assert [p.name for p in path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    checkpoint.delete()
    assert checkpoint.state is client.CheckpointState.DELETED and not path.exists()
    with pytest.raises(errors.CheckpointNotFound):
        determined.get_checkpoint(checkpoint.uuid)


def test_a_runs_checkpoint_straight_under_the_directory(
    searched: Dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """``det-lightning run`` and ``pytorch.init()`` write ``<dir>/<uuid>``: found by UUID."""
    source = _client(searched["root"]).get_experiment(searched["id"]).list_checkpoints()[0]
    root = tmp_path / "checkpoints"
    shutil.copytree(source.download(), root / source.uuid)
    (root / source.uuid / "code" / "metadata.json").write_text('{"mine": 1}')  # the user's
    found = _client(root).get_checkpoint(source.uuid)
    assert found.download() == str(root / source.uuid)
    existing = tmp_path / "existing"
    existing.mkdir()  # an empty folder: copied into, metadata.json last
    found.download(str(existing))
    assert ckpt.is_complete(existing)
    assert (existing / "code" / "metadata.json").read_text() == '{"mine": 1}'
    assert found.training.hparams == source.training.hparams
    assert found.training.experiment_config["searcher"]["name"] == "grid"


def test_create_experiment_starts_it_and_wait_waits(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """Started; paused (PAUSED: wait() raises); killed (CANCELED: terminal, for every reader);
    continued by another client to the end from the checkpoint the pause wrote."""
    from det_lightning._runner import cli

    project, root = _project(tmp_path), tmp_path / "checkpoints"
    determined = _client(root)
    config = yaml.safe_load((project / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 400}
    config["min_validation_period"] = {"batches": 40}
    config["min_checkpoint_period"] = {"batches": 40}
    with pytest.raises(errors.InvalidConfigException, match="searcher.nmae"):
        determined.create_experiment({**config, "searcher": {"nmae": "x"}}, str(project))
    assert not root.exists()  # refused before anything started

    experiment = determined.create_experiment(config, str(project))
    assert experiment.id.startswith("regression-const-")
    # The dict is written into the experiment's folder, which activate() reruns from (not a
    # temporary folder left behind by every call).
    (written,) = (root / experiment.id).glob("config-*.yaml")
    assert yaml.safe_load(written.read_text()) == config
    assert str(written) in experiment._command
    trial = experiment.await_first_trial()
    _wait_for_a_checkpoint(root / experiment.id / "trial-1")
    experiment.pause()  # SIGTERM, as Ctrl+C: the trial checkpoints and the command exits 75
    assert experiment._process is not None and experiment._process.returncode == 75
    assert experiment.state is client.ExperimentState.PAUSED
    with pytest.raises(ValueError, match="paused state.*det-lightning experiment"):
        experiment.wait(interval=0.5)
    paused_at = max(c.metadata["steps_completed"] for c in trial.list_checkpoints())
    assert 0 < paused_at < 400
    with pytest.raises(ValueError, match=r"is PAUSED: .* cancel\(\) it first"):
        experiment.delete()  # as on Determined: only a terminal experiment

    # kill() stops a running process as pause() does (one code path), then marks it.
    experiment.kill()  # Determined's terminal CANCELED
    assert experiment.state is client.ExperimentState.CANCELED
    assert experiment.wait(interval=0.5) is client.ExperimentState.CANCELED  # no ValueError
    assert experiment.list_trials()[0].state is client.TrialState.CANCELED
    elsewhere = _client(root).get_experiment(experiment.id)  # another reader: the same state
    assert elsewhere.state is client.ExperimentState.CANCELED
    elsewhere.cancel()  # canceled already: nothing changes
    capsys.readouterr()
    assert cli.main(["experiment", "list", "--checkpoint-dir", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[3] == "CANCELED"

    # Another client (a notebook later) continues it: the command from its record; that
    # takes the cancel back, and the trial resumes from the pause's checkpoint.
    resumed = _client(root).get_experiment(experiment.id)
    capsys.readouterr()
    resumed.activate()
    where = resumed._command.index("--checkpoint-dir")
    assert resumed._command[where + 1] == str(root) and resumed._process
    assert resumed.state is client.ExperimentState.ACTIVE  # the cancel taken back at once
    assert f"Experiment {experiment.id} was canceled (kill() at" in capsys.readouterr().err
    assert resumed.wait(interval=0.5) is client.ExperimentState.COMPLETED, _log(resumed)
    assert "resum" in _log(resumed)
    resumed.activate()  # completed: nothing is started
    assert resumed._process.returncode == 0
    experiment.reload()  # the first client's object reads the files again
    assert not (root / experiment.id / "canceled.json").exists()
    best = experiment.list_checkpoints(max_results=1)[0]
    latest = max(experiment.list_checkpoints(), key=lambda c: c.metadata["steps_completed"])
    assert latest.metadata["steps_completed"] == 400
    assert best.training.trial_id == 1 and experiment.list_trials()[0].hparams["hidden_size"] == 8
    assert experiment.list_trials()[0].state is client.TrialState.COMPLETED
    experiment.cancel()  # completed: it stays so
    assert experiment.state is client.ExperimentState.COMPLETED
    experiment.delete()
    assert list(root.iterdir()) == []


def _ended(experiment: client.Experiment, timeout_s: float = 120.0) -> int:
    """Waits for the process this client started to end; its exit status."""
    assert experiment._process is not None
    try:
        return experiment._process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        experiment._process.kill()
        raise AssertionError(f"still running after {timeout_s} s:\n{_log(experiment)}") from None


def _frozen_after_a_checkpoint(
    tmp_path: pathlib.Path, root: pathlib.Path
) -> Tuple[client.Experiment, pathlib.Path]:
    """An experiment started by a client that cannot end on its own, frozen (SIGSTOP to its
    worker; the trial has a process group of its own) once its trial has a checkpoint; and
    that trial's folder."""
    project = _project(tmp_path)
    config = yaml.safe_load((project / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 10_000_000}
    config["min_validation_period"] = {"batches": 40}
    config["min_checkpoint_period"] = {"batches": 40}
    runner = _client(root).create_experiment(config, str(project))
    trial_dir = root / runner.id / "trial-1"
    _wait_for_a_checkpoint(trial_dir)
    assert runner._process is not None
    os.killpg(runner._process.pid, signal.SIGSTOP)
    return runner, trial_dir


def test_a_cancel_from_anywhere_stops_the_running_experiment(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """As on Determined, ``cancel()`` from another client (another process, a notebook, a
    machine sharing the folder) and ``det-lightning experiment kill ID`` from a shell stop an
    experiment that runs elsewhere: STOPPING_CANCELED (STOPPING_KILLED) at once, then its
    process sees the mark, its trial stops with a checkpoint, the command says so and exits
    1 (not 75: a scheduler requeueing on 75 would undo the cancel), and it is CANCELED.

    The experiment's process is frozen (SIGSTOP) while it is canceled, so that the states
    read while it stops do not depend on how fast it stops."""
    from det_lightning._runner import cli

    root = tmp_path / "checkpoints"
    runner, trial_dir = _frozen_after_a_checkpoint(tmp_path, root)
    assert runner._process is not None
    try:
        elsewhere = _client(root).get_experiment(runner.id)  # no process of its own
        assert elsewhere.state is client.ExperimentState.ACTIVE
        elsewhere.cancel()  # returns at once
        assert elsewhere.state is client.ExperimentState.STOPPING_CANCELED
        with pytest.raises(ValueError, match=r"is stopping.*wait\(\) until it is CANCELED"):
            elsewhere.activate()
        capsys.readouterr()
        assert cli.main(["experiment", "kill", runner.id, "--checkpoint-dir", str(root)]) == 0
        assert capsys.readouterr().out == f"experiment {runner.id}: STOPPING_KILLED\n"
        assert cli.main(["experiment", "list", "--checkpoint-dir", str(root)]) == 0
        assert capsys.readouterr().out.splitlines()[1].split()[3] == "STOPPING_KILLED"
        before = max(e.metadata["steps_completed"] for e in ckpt.list_local(trial_dir))
    finally:
        os.killpg(runner._process.pid, signal.SIGCONT)
    _said_it_stopped(runner, "canceled (kill()", "CANCELED")
    capsys.readouterr()
    assert cli.main(["experiment", "describe", runner.id, "--checkpoint-dir", str(root)]) == 0
    described = capsys.readouterr().out.splitlines()  # the trial as the summary showed it
    assert described[0].endswith(": CANCELED") and described[4].split()[:2] == ["1", "CANCELED"]
    assert elsewhere.wait(interval=0.2) is client.ExperimentState.CANCELED
    assert elsewhere.list_trials()[0].state is client.TrialState.CANCELED
    stopped_at = max(e.metadata["steps_completed"] for e in ckpt.list_local(trial_dir))
    assert stopped_at > before, _log(runner)  # it trained on, then checkpointed where it stopped


def test_a_pause_from_anywhere_then_activate(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """As on Determined, ``det-lightning experiment pause ID`` (the client's ``pause()``) from
    any terminal pauses an experiment that runs elsewhere: PAUSED at once for every reader;
    its process sees the mark, its trial stops with a checkpoint, and the command says so and
    exits 1 (not 75: a scheduler requeueing on 75 would undo the pause). ``activate()``,
    called while the trial still stops, waits for it, then continues the experiment from
    that checkpoint.

    The experiment's process is frozen (SIGSTOP) while it is paused and activated, so that
    what is read meanwhile does not depend on how fast it stops."""
    from det_lightning._runner import cli

    root = tmp_path / "checkpoints"
    runner, trial_dir = _frozen_after_a_checkpoint(tmp_path, root)
    assert runner._process is not None
    try:
        capsys.readouterr()
        assert cli.main(["experiment", "pause", runner.id, "--checkpoint-dir", str(root)]) == 0
        assert capsys.readouterr().out == f"experiment {runner.id}: PAUSED\n"
        elsewhere = _client(root).get_experiment(runner.id)  # no process of its own
        assert elsewhere.state is client.ExperimentState.PAUSED
        with pytest.raises(ValueError, match="paused state"):
            elsewhere.wait(interval=0.2)
        activating = threading.Thread(target=elsewhere.activate)
        activating.start()
        activating.join(0.5)  # it waits for the trial (frozen) to stop: nothing is started
        assert activating.is_alive() and elsewhere._process is None
        before = max(e.metadata["steps_completed"] for e in ckpt.list_local(trial_dir))
    finally:
        os.killpg(runner._process.pid, signal.SIGCONT)
    try:
        _said_it_stopped(runner, "paused (pause()", "PAUSED")
        paused_at = max(e.metadata["steps_completed"] for e in ckpt.list_local(trial_dir))
        assert paused_at > before, _log(runner)  # it trained on, then checkpointed then

        activating.join(120)
        assert not activating.is_alive() and elsewhere._process is not None
        _wait_for_a_checkpoint(trial_dir, after=paused_at)  # it resumed and trained on
        assert not (root / runner.id / "paused.json").exists()  # activate() took it back
        elsewhere.kill()  # its own process: stopped as Ctrl+C, then marked
        assert elsewhere.state is client.ExperimentState.CANCELED
    finally:  # nothing left running when an assertion fails
        activating.join(120)
        if elsewhere._process is not None and elsewhere._process.poll() is None:
            os.killpg(elsewhere._process.pid, signal.SIGKILL)
            elsewhere._process.wait()
    assert f"Experiment {runner.id} was paused (pause() at" in capsys.readouterr().err
    assert "resumed from its latest checkpoint" in _log(elsewhere), _log(elsewhere)


def _trial_group(worker: int, timeout_s: float = 60.0) -> int:
    """The process group of the trial that the worker ``worker`` (a process group leader)
    runs: a descendant's group that is not the worker's (a trial has one of its own)."""
    deadline = time.monotonic() + timeout_s
    while True:
        parents: Dict[int, int] = {}
        for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:  # ended meanwhile
                continue
            parents[int(stat.parent.name)] = int(fields[1])
        groups = set()
        for pid in parents:
            ancestor = parents.get(pid)
            while ancestor is not None and ancestor != worker and ancestor > 1:
                ancestor = parents.get(ancestor)
            if ancestor == worker and os.getpgid(pid) != worker:
                groups.add(os.getpgid(pid))
        if len(groups) == 1:
            return groups.pop()
        assert time.monotonic() < deadline, f"no single trial group under {worker}: {groups}"
        time.sleep(0.1)


def test_a_kill_while_a_pause_stops_the_trial_ends_canceled(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """Paused, then killed while its trial still stopped for the pause: the command said
    PAUSED (the mark it had seen) while every reader said CANCELED. A cancel outranks a pause,
    in its summary too. The trial is frozen (SIGSTOP) between the two, so the worker has seen
    the pause and waits for the trial when the kill comes."""
    root = tmp_path / "checkpoints"
    runner, _ = _frozen_after_a_checkpoint(tmp_path, root)
    assert runner._process is not None
    trial = _trial_group(runner._process.pid)
    os.killpg(trial, signal.SIGSTOP)
    try:
        elsewhere = _client(root).get_experiment(runner.id)
        elsewhere.pause()
        os.killpg(runner._process.pid, signal.SIGCONT)  # the worker sees the pause
        deadline = time.monotonic() + 60
        while "The experiment was paused (pause() at" not in _log(runner):
            assert time.monotonic() < deadline, _log(runner)
            time.sleep(0.1)
        elsewhere.kill()
        assert elsewhere.state is client.ExperimentState.STOPPING_KILLED
    finally:
        os.killpg(trial, signal.SIGCONT)
        os.killpg(runner._process.pid, signal.SIGCONT)
    assert _ended(runner) == 1, _log(runner)
    log = _log(runner)
    assert f"experiment {runner.id} was canceled (kill() at" in log and "Traceback" not in log
    assert any(line.split()[:2] == ["1", "CANCELED"] for line in log.splitlines()), log
    assert elsewhere.wait(interval=0.2) is client.ExperimentState.CANCELED


def test_activate_continues_with_the_storage_and_launch_flags_it_ran_with(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """An experiment started from a shell with ``--storage`` and launch flags, canceled, then
    activated by a client given neither: read, continued and deleted in the storage its record
    names (the client's own default, the journal, holds no search: activate() without it
    started a search over, now refused), with the flags of the command that last ran it."""

    project, root = _project(tmp_path), tmp_path / "checkpoints"
    config = yaml.safe_load((project / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 10_000_000}
    config["min_checkpoint_period"] = {"batches": 40}
    (project / "long.yaml").write_text(yaml.safe_dump(config))
    database = f"sqlite:///{tmp_path / 'search.db'}"
    flags = ["--heartbeat-timeout", "90.0", "--workers", "2"]
    shell_log = tmp_path / "shell.log"
    with open(shell_log, "wb") as out:
        command = [sys.executable, "-m", "det_lightning", "experiment", "long.yaml", "."]
        shell = subprocess.Popen(
            [*command, "--checkpoint-dir", str(root), "--storage", database, *flags],
            cwd=project,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    elsewhere: "client.Experiment | None" = None
    try:
        (experiment_id,) = _wait_for(lambda: [p.parent.name for p in root.glob("*/trial-1")])
        trial_dir = root / experiment_id / "trial-1"
        _wait_for_a_checkpoint(trial_dir)
        elsewhere = _client(root).get_experiment(experiment_id)
        assert elsewhere.state is client.ExperimentState.ACTIVE  # read from its database
        assert [t.state for t in elsewhere.list_trials()] == [client.TrialState.RUNNING]
        elsewhere.cancel()
        assert shell.wait(timeout=120) == 1, shell_log.read_text()
        assert elsewhere.wait(interval=0.2) is client.ExperimentState.CANCELED
        stopped = max(e.metadata["steps_completed"] for e in ckpt.list_local(trial_dir))

        elsewhere.activate()
        assert elsewhere._process is not None
        args = list(elsewhere._process.args)  # type: ignore[arg-type]
        assert args[args.index("--storage") + 1] == database, args
        assert " ".join(flags) in " ".join(args), args
        _wait_for_a_checkpoint(trial_dir, after=stopped)  # resumed in its search, trained on
        log = _log(elsewhere)
        assert "2 workers share this search" in log and "resumed from" in log, log
        elsewhere.kill()
        assert elsewhere.state is client.ExperimentState.CANCELED
    finally:  # nothing left running when an assertion fails
        for process in (shell, elsewhere and elsewhere._process):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    import optuna

    record = json.loads((root / experiment_id / "experiment.json").read_text())
    assert record["storage"] == database
    assert any(experiment_id in n for n in optuna.get_all_study_names(database))
    elsewhere.delete()  # its studies too, from its database: none left for a new one to find
    assert not any(experiment_id in n for n in optuna.get_all_study_names(database))


def test_a_database_password_is_not_recorded_and_is_asked_for(
    searched: Dict[str, Any], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """A record keeps a database URL without its password; reading the experiment without
    being given that URL says what to pass (it read the wrong storage: no trials, a wrong
    state)."""
    from det_lightning._runner import cli
    from det_lightning._runner._record import search_storage, shown_storage

    root = tmp_path / "checkpoints"
    shutil.copytree(searched["root"], root)
    url = "postgresql://me:s3cret@db.example/search"
    path = root / searched["id"] / "experiment.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "storage": shown_storage(url)}))
    assert "s3cret" not in path.read_text()
    capsys.readouterr()
    assert cli.main(["experiment", "describe", searched["id"], "--checkpoint-dir", str(root)]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert "postgresql://me:***@db.example/search, whose password its record leaves out" in said
    assert "--storage URL" in said, said
    with pytest.raises(ValueError, match="Determined.storage=URL."):
        _client(root).get_experiment(searched["id"])
    assert search_storage(json.loads(path.read_text()), url) == url  # given: used


def _wait_for(found: Callable[[], List[str]], timeout_s: float = 120.0) -> List[str]:
    deadline = time.monotonic() + timeout_s
    while not found():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.1)
    return found()


def _said_it_stopped(runner: client.Experiment, how: str, status: str) -> None:
    """The experiment's command saw its mark (``how``: ``canceled (kill()``), stopped its trial
    (``status`` in the summary), said so last, and exited 1."""
    assert _ended(runner) == 1, _log(runner)
    log = _log(runner)
    assert f"The experiment was {how} at" in log, log
    assert f"experiment {runner.id} was {how} at" in log and "Traceback" not in log
    assert any(line.split()[:2] == ["1", status] for line in log.splitlines()), log
    assert "Exiting with status 75" not in log, log  # the trial's line leaves it to the command


def _wait_for_a_checkpoint(trial: pathlib.Path, timeout_s: float = 120.0, after: int = -1) -> None:
    """Waits for a checkpoint in ``trial`` (one of more than ``after`` steps)."""
    deadline = time.monotonic() + timeout_s
    while not [e for e in ckpt.list_local(trial) if e.metadata["steps_completed"] > after]:
        assert time.monotonic() < deadline, f"no checkpoint in {trial}"
        time.sleep(0.1)


def _log(experiment: client.Experiment) -> str:
    assert experiment._log is not None
    return experiment._log.read_text(errors="replace")


def test_a_failing_experiment_ends_in_error(tmp_path: pathlib.Path) -> None:
    project, root = _project(tmp_path), tmp_path / "checkpoints"
    (project / "model_def.py").write_text("raise RuntimeError('broken model_def')\n")
    experiment = _client(root).create_experiment(str(project / "const.yaml"), str(project))
    assert experiment.wait(interval=0.5) is client.ExperimentState.ERROR
    assert "broken model_def" in _log(experiment)


def test_an_experiment_in_a_bucket(s3_server: S3, tmp_path: pathlib.Path) -> None:
    """The checkpoint directory a URL (moto's S3 server): read through the same store."""
    project, url = _project(tmp_path), s3_server.url("team")
    result = run_cli("experiment", "const.yaml", ".", "--checkpoint-dir", url, cwd=project)
    assert result.returncode == 0, output(result)
    (experiment,) = client.Determined(checkpoint_dir=url).list_experiments()
    assert experiment.state is client.ExperimentState.COMPLETED
    best = experiment.list_checkpoints(max_results=1)[0]
    assert best.training.validation_metrics["avgMetrics"]["validation_loss"] > 0
    cached = pathlib.Path(best.download())  # a download into the cache, not the project
    assert ckpt.is_complete(cached) and project not in cached.parents
    target = tmp_path / "best"
    best.download(str(target))
    loaded = load_checkpoint(target, "trial_class", cwd=project)
    assert loaded["max_weight_difference"] == 0.0
    with pytest.raises(NotImplementedError, match="in a bucket .* Download it"):
        best.add_metadata({"stage": "production"})


CORE_LOOP = """
import determined as det

with det.core.init() as core_context:
    for op in core_context.searcher.operations():
        for step in range(1, 4):
            core_context.train.report_training_metrics(step, {"loss": 1.0 / step})
            core_context.train.report_validation_metrics(step, {"test_loss": 2.0 / step})
            with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "state.txt").write_text(str(step))
        op.report_completed(2.0 / 3)
"""


def test_a_core_api_trials_validations(tmp_path: pathlib.Path) -> None:
    """A Core API loop's validations are kept too (``report_validation_metrics``)."""
    project, root = tmp_path / "project", tmp_path / "checkpoints"
    project.mkdir()
    (project / "loop.py").write_text(CORE_LOOP)
    config = {
        "name": "core-loop",
        "entrypoint": "python3 loop.py",
        "searcher": {"name": "single", "metric": "test_loss", "max_length": {"batches": 3}},
    }
    (project / "core.yaml").write_text(yaml.safe_dump(config))
    args = ["experiment", "core.yaml", ".", "--checkpoint-dir", str(root)]
    result = run_cli(*args, cwd=project)
    assert result.returncode == 0, output(result)
    (trial,) = _client(root).list_experiments()[0].list_trials()
    history = list(trial.iter_metrics("validation"))
    assert [(m.steps_completed, m.metrics["test_loss"]) for m in history] == [
        (1, 2.0),
        (2, 1.0),
        (3, 2.0 / 3),
    ]
    summary = trial.summary_metrics["validation_metrics"]["test_loss"]
    assert summary["count"] == 3 and summary["last"] == summary["min"] == 2.0 / 3
    # Its checkpoints get the validation at their steps_completed, as Determined matched them.
    best = trial.list_checkpoints()[0]
    assert best.metadata["steps_completed"] == 3
    assert best.training.validation_metrics["avgMetrics"] == {"test_loss": 2.0 / 3}


def test_create_experiment_finds_its_config_checkpoint_storage(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The config's checkpoint_storage puts the experiment outside the client's directory:
    the experiment the client started is still found there."""
    project, elsewhere = _project(tmp_path), tmp_path / "team-storage"
    monkeypatch.setenv("DET_LIGHTNING_CHECKPOINT_DIR", str(tmp_path / "mine"))
    config = yaml.safe_load((project / "const.yaml").read_text())
    config["checkpoint_storage"] = {"type": "shared_fs", "host_path": str(elsewhere)}
    experiment = client.Determined().create_experiment(config, str(project))
    assert experiment.wait(interval=0.5) is client.ExperimentState.COMPLETED, _log(experiment)
    assert (elsewhere / experiment.id / "experiment.json").exists()
    assert _log(experiment) and experiment._log.parent == elsewhere / experiment.id
    (best,) = experiment.list_checkpoints(max_results=1)
    assert pathlib.Path(best.download()).parent.parent == elsewhere / experiment.id
    with pytest.raises(client.ExperimentNotFound, match="mine"):
        client.Determined().get_experiment(experiment.id)  # not in the client's directory
