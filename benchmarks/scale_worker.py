"""The scale drill's processes (``search_scale.py``): search workers forked from one warm
process, each running det_lightning's worker loop, and their stand-in trials.

    python benchmarks/scale_worker.py SPEC.json

imports det_lightning (and with it torch) once, then forks ``spec["workers"]`` workers, each as a
machine of its own (``$DET_LIGHTNING_HOST_ID``: a dead worker's lease expires only after
``--heartbeat-timeout``, as across machines). Each worker runs the search's real loop
(``_worker._loop``: leases, takeovers, ASHA brackets, the database storage) on a command
entrypoint's plan; its trial's process is forked from the worker (it dies with it, as a trial
forked from the warm template does) and runs ``stand_in_trial``: the real ``SearchReporter`` at
each rung and a real checkpoint upload to the bucket after each validation, under the search's
publish check, with ``sleep`` for the training. Each report is written to ``spec["events"]``.
"""

import functools
import gc
import json
import logging
import os
import pathlib
import signal
import sys
import time
import traceback
import uuid
from typing import Any, Dict, List, Optional

PROJECT_FILES = {"train.py": "raise SystemExit('the scale drill runs a stand-in trial')\n"}


class StandInContext:
    """What the ``SearchReporter`` asks a trial's context: its rank, its batches trained, and
    the stop request."""

    class distributed:  # noqa: N801 (as PyTorchTrialContext.distributed)
        rank = 0

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.stop = False

    def current_train_batch(self) -> int:
        return self.batches - 1

    def set_stop_requested(self, stop: bool) -> None:
        self.stop = stop


def _value(hparams: Dict[str, Any], batches: int) -> float:
    """A loss that falls with training, ranked by the trial's hyperparameter."""
    return float(hparams["x"]) / (1.0 + batches)


def _resume_from(latest: Optional[str]) -> int:
    from det_lightning.pytorch._remote import checkpoint_location

    if not latest:
        return 0
    metadata = checkpoint_location(latest).local_copy() / "metadata.json"
    return int(json.loads(metadata.read_text())["steps_completed"])


def _checkpoint(root: Any, batches: int, scratch: pathlib.Path) -> None:
    local = scratch / uuid.uuid4().hex
    local.mkdir(parents=True)
    (local / "metadata.json").write_text(json.dumps({"steps_completed": batches}))
    (local / "state.json").write_text(json.dumps({"batches": batches}))
    root.publish(local.name, local)


def stand_in_trial(events: pathlib.Path, seconds: float) -> int:
    """One trial's process: ``seconds`` of "training" over the search's full length, reporting
    at each rung through the real reporter and checkpointing after each report."""
    from det_lightning._env import CHECKPOINT_DIR_ENV, SEARCH_ENV
    from det_lightning._info import get_cluster_info
    from det_lightning._runner.search import _child
    from det_lightning.pytorch import Batch
    from det_lightning.pytorch._remote import checkpoint_location
    from det_lightning.pytorch._store import publish_check

    info = get_cluster_info()
    assert info is not None
    spec = json.loads(os.environ[SEARCH_ENV])
    settings, bracket = _child._settings(spec)
    live = _child._search_trial()
    number = info.trial.trial_id
    context = StandInContext(_resume_from(info.latest_checkpoint))
    reporter = _child.SearchReporter(
        live.study, live, settings, bracket, context=context, max_length=Batch(settings.max_time)
    )
    root = checkpoint_location(os.environ[CHECKPOINT_DIR_ENV])
    scratch = pathlib.Path(os.environ["DET_LIGHTNING_CACHE_DIR"]) / "scratch"
    validations = set(bracket.rung_units) | {settings.max_time}
    step = seconds / settings.max_time
    with publish_check(_child._still_leased):
        while context.batches < settings.max_time and not context.stop:
            time.sleep(step)
            context.batches += 1
            if context.batches not in validations:
                continue
            _report(reporter, context, number=number, events=events)
            reporter.on_checkpoint_save_start({})
            _checkpoint(root, context.batches, scratch)
    return 0


def _report(reporter: Any, context: StandInContext, *, number: int, events: pathlib.Path) -> None:
    """One validation through the reporter, and its decision written to ``events``."""
    value = _value(reporter.trial.user_attrs["hparams"], context.batches)
    recorder = reporter.recorder  # the rungs it keeps (``_reporter.RungRecorder``)
    rung, before = recorder.rung, dict(recorder.rungs)
    read = time.time()
    reporter.on_validation_end({"loss": value})
    line = {
        "trial": number,
        "study": reporter.study.study_name,
        "pid": os.getpid(),
        "batches": context.batches,
        "value": value,
        "rung_before": rung,
        "entered": sorted(set(recorder.rungs) - set(before)),
        "rung": recorder.rung,
        "stop": context.stop,
        "read": read,
        "written": reporter.decided_at,  # inside the study's lock: the decisions' order
    }
    with open(events, "a") as out:
        out.write(json.dumps(line) + "\n")


def _forget_filesystems() -> None:
    """fsspec's filesystems are not fork-safe: a forked trial makes its own (as a trial forked
    from the warm template, which never made one, does)."""
    import fsspec.asyn
    import s3fs

    from det_lightning.pytorch import _buckets

    fsspec.asyn.reset_lock()
    _buckets._FILESYSTEMS.clear()
    s3fs.S3FileSystem.clear_instance_cache()


def fork_trial(spec: Dict[str, Any], interrupt: Any, request: Any, lost: Any) -> Optional[int]:
    """The worker's ``launch``: the stand-in trial in a process forked from this worker; its
    exit status, or None once ``lost`` is set (the process killed)."""
    from det_lightning._runner._template import die_with_parent

    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            die_with_parent(parent)
            _forget_filesystems()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.environ.clear()
            os.environ.update(request.env)
            code = stand_in_trial(pathlib.Path(spec["events"]), spec["trial_seconds"])
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if lost is not None and lost.is_set():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.05)


def worker(index: int, spec: Dict[str, Any]) -> None:
    """One search worker: det_lightning's loop on the drill's search."""
    from det_lightning._runner._lease import HOST_ID_ENV, LeaseSettings
    from det_lightning._runner._search_settings import search_key
    from det_lightning._runner.config import load_config
    from det_lightning._runner.plan import plan_experiment
    from det_lightning._runner.search._experiment_seed import experiment_seed
    from det_lightning._runner.search._interrupt import SearchInterrupt
    from det_lightning._runner.search._storage import open_storage, open_studies
    from det_lightning._runner.search._worker import WorkerSetup, _loop

    logging.basicConfig(level=logging.INFO, format=f"worker {index} %(asctime)s %(message)s")
    os.environ[HOST_ID_ENV] = f"drill-machine-{index}"
    os.environ["DET_LIGHTNING_CACHE_DIR"] = f"{spec['cache']}/{index}"
    plan = plan_experiment(load_config(spec["config"]), spec["project"], None, spec["checkpoints"])
    assert plan.search is not None
    storage = open_storage(spec["storage"], plan.checkpoint_root)
    seed = plan.config.reproducibility_config.experiment_seed
    studies = open_studies(storage, search_key(plan.config.raw), plan.search, seed=seed)
    with SearchInterrupt() as interrupt:
        setup = WorkerSetup(
            plan, plan.search, spec["storage"], functools.partial(fork_trial, spec, interrupt)
        )
        _loop(
            setup,
            studies,
            interrupt,
            LeaseSettings(spec["heartbeat_timeout"]),
            seed=experiment_seed(studies[0], seed),
        )


def main(argv: List[str]) -> int:
    spec = json.loads(pathlib.Path(argv[0]).read_text())
    import s3fs  # noqa: F401 (and botocore: the workers' and trials' checkpoint uploads)

    import det_lightning._runner.search._worker  # noqa: F401 (warm: torch, optuna, sqlalchemy)

    gc.freeze()  # what the workers inherit stays shared: their collections leave it untouched

    pids = []
    for index in range(spec["workers"]):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                worker(index, spec)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    pathlib.Path(spec["pids"]).write_text(json.dumps(pids))
    failed = 0
    for pid in pids:
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        failed += status not in (0, -signal.SIGKILL)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    raise SystemExit(main(sys.argv[1:]))
