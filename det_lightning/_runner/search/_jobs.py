"""What a search's trial runs in its own process (``_template``), and how the worker reads
how it ended::

    model_def trial:  legacy_job(plan, number, hparams, lengths, latest, result_path)
        run_legacy_trial, its fit() reporting to the search ($DET_LIGHTNING_SEARCH, as for a
        command trial: ``_child.reporting_to_search``); writes result_path (JSON): {"best",
        "checkpoint", "batches"}, or {"error": the exception's kind, "message", "traceback"}
        With ``--devices N`` (``resources.slots_per_trial``), N > 1: it starts torchrun, whose
        N processes (``python -m det_lightning._runner.search._jobs ARGS``) each run
        legacy_job; the chief writes result_path. One torchrun per trial: every trial meets
        at a rendezvous of its own, and a search's worker is never a rank.
        worker: read_legacy_result -> TrialResult, or raises what the trial raised
                (InvalidHP, InvalidExperimentException, LeaseLost; any other: TrialProcessError)
    command trial:    ``det_lightning._runner.cli:main(["run", ...])``, as
                      `python -m det_lightning run ...`

The worker waits with ``run_trial``: it passes a SIGTERM/SIGINT on to the trial once, kills it
at once when its lease is lost, and a trial that ends after a signal is preempted (it stays
RUNNING; rerunning the search resumes it).
"""

import json
import logging
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from typing import Any, Dict, List, Optional

from det_lightning import errors
from det_lightning._runner import _torchrun
from det_lightning._runner._template import TrialRequest, TrialStarter
from det_lightning._runner.plan import Plan
from det_lightning._runner.search._interrupt import SearchInterrupt, past
from det_lightning._runner.trial import Launch, TrialResult, run_legacy_trial

logger = logging.getLogger("det_lightning")

# Exceptions of a trial the search handles by kind; any other makes the trial an ERROR.
PASSED_ON = ("InvalidHP", "InvalidExperimentException", "InvalidConfigException", "LeaseLost")


class TrialProcessError(RuntimeError):
    """A trial's process failed: its exception (with the trial's traceback), or how it died."""


def legacy_job(  # noqa: PLR0917  run as func(*args): a pickled tuple (TrialRequest, ranks)
    plan: Plan,
    number: int,
    hparams: Dict[str, Any],
    lengths: Optional[Dict[str, Any]],
    latest: Optional[str],
    result_path: str,
) -> int:
    """In the trial's process: one ``model_def:Trial`` trial; how it ended goes to
    ``result_path``."""
    import det_lightning

    logging.basicConfig(level=logging.INFO, format=det_lightning.LOG_FORMAT)
    devices = plan.launch.get("devices")
    if isinstance(devices, int) and devices > 1 and "LOCAL_RANK" not in os.environ:
        return _on_ranks(devices, (plan, number, hparams, lengths, latest, result_path))
    from det_lightning import compat
    from det_lightning._runner._lease import LeaseLost
    from det_lightning._runner.search._child import reporting_to_search

    compat.install()  # model_def.py imports determined
    try:
        with reporting_to_search():
            result = run_legacy_trial(
                plan, number, hparams, lengths=lengths, latest_checkpoint=latest
            )
    except (
        errors.InvalidHP,
        errors.InvalidExperimentException,
        errors.InvalidConfigException,
        LeaseLost,
    ) as e:
        message = e.msg if isinstance(e, errors.InvalidHP) else str(e)
        kind = next(k for k in PASSED_ON if any(c.__name__ == k for c in type(e).__mro__))
        _write(result_path, {"error": kind, "message": message})
        return 1
    except Exception as e:
        _write(
            result_path,
            {
                "error": type(e).__name__,
                "message": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(),
            },
        )
        return 1
    checkpoint = str(result.checkpoint) if result.checkpoint else None
    _write(
        result_path,
        {"best": result.best_metric, "checkpoint": checkpoint, "batches": result.batches},
    )
    return 0


def rank_command(devices: int, args_path: str) -> List[str]:
    """torchrun starting ``devices`` processes of one trial on this machine, each reading its
    ``legacy_job`` arguments from ``args_path``; ``--standalone``: a rendezvous on a free port
    of its own, so trials of several workers on one machine never meet.

    >>> rank_command(2, "t.args")[-3:]
    ['-m', 'det_lightning._runner.search._jobs', 't.args']
    """
    jobs = "det_lightning._runner.search._jobs"  # this module, as each rank runs it
    return _torchrun.command(devices, _torchrun.STANDALONE, jobs, [args_path])


def _on_ranks(devices: int, args: tuple) -> int:
    """Runs ``legacy_job(*args)`` on ``devices`` processes under torchrun and returns
    torchrun's exit status. A signal to the trial's process group reaches torchrun, which
    passes it to its ranks and waits for them (they checkpoint and stop); this process only
    waits."""
    number, result_path = args[1], args[5]
    args_path = f"{result_path}.args"
    pathlib.Path(args_path).write_bytes(pickle.dumps(args))
    logger.info(f"trial {number}: starting {devices} processes (torchrun --standalone)")
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return subprocess.call(rank_command(devices, args_path))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        pathlib.Path(args_path).unlink(missing_ok=True)


def rank_main(argv: List[str]) -> int:
    """One rank of a trial that ``_on_ranks`` started: ``legacy_job`` with its arguments; the
    chief writes the trial's result, the other ranks' results are dropped. It dies with its
    torchrun (a search that lost the trial kills torchrun's process group, which torchrun's
    ranks, in sessions of their own, are not in)."""
    from det_lightning._job_processes import quiet_unless_chief
    from det_lightning._runner._template import die_with_parent

    die_with_parent(os.getppid())
    quiet_unless_chief(os.environ)
    plan, number, hparams, lengths, latest, result_path = pickle.loads(
        pathlib.Path(argv[0]).read_bytes()
    )
    rank = os.environ.get("RANK", "0")
    mine = result_path if rank == "0" else f"{result_path}.rank{rank}"
    try:
        return legacy_job(plan, number, hparams, lengths, latest, mine)
    finally:
        if mine != result_path:
            pathlib.Path(mine).unlink(missing_ok=True)


def _write(path: str, data: Dict[str, Any]) -> None:
    partial = f"{path}.partial"
    pathlib.Path(partial).write_text(json.dumps(data))
    os.replace(partial, path)


def describe(status: int) -> str:
    """How a process ended, from its exit status (negative: the signal that killed it).

    >>> describe(-9), describe(3)
    ('was killed by SIGKILL', 'exited with status 3')
    """
    if status < 0:
        return f"was killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


def read_legacy_result(
    number: int, hparams: Dict[str, Any], status: int, result_path: str
) -> TrialResult:
    """The ``TrialResult`` a model_def trial's process left.

    Raises:
        errors.InvalidHP, errors.InvalidExperimentException, errors.InvalidConfigException,
            LeaseLost: the trial raised it.
        TrialProcessError: it raised anything else, or its process died.
    """
    from det_lightning._runner._lease import LeaseLost
    from det_lightning.pytorch._remote import checkpoint_location

    path = pathlib.Path(result_path)
    data = json.loads(path.read_text()) if path.exists() else {}
    error, message = data.get("error"), data.get("message", "")
    if error == "InvalidHP":
        raise errors.InvalidHP(message)
    if error == "InvalidExperimentException":
        raise errors.InvalidExperimentException(message)
    if error == "InvalidConfigException":  # the entrypoint cannot be loaded
        raise errors.InvalidConfigException(message)
    if error == "LeaseLost":
        raise LeaseLost(message)
    if error:
        raise TrialProcessError(
            f"trial {number}: {message}\n\nThe trial's traceback:\n{data.get('traceback', '')}"
        )
    if status != 0 or "best" not in data:
        raise TrialProcessError(f"trial {number}: its process {describe(status)}")
    checkpoint = data["checkpoint"]
    return TrialResult(
        number,
        hparams,
        "COMPLETED",
        data["best"],
        checkpoint_location(checkpoint) if checkpoint else None,
        batches=data["batches"],
    )


def run_trial(
    starter: TrialStarter,
    interrupt: SearchInterrupt,
    request: TrialRequest,
    lost: Optional[threading.Event],
) -> Optional[int]:
    """Runs ``request`` in a process of its own and returns its exit status; None, with the
    process killed, once ``lost`` is set (another worker took the trial over).

    Raises:
        errors.TrialPreempted: a signal or the experiment's cancel or pause stopped the trial
            (or came before it started).
    """
    interrupt.look()
    if interrupt.received is not None:
        how = past(interrupt.received) if interrupt.mark is not None else "stopped by a signal"
        raise errors.TrialPreempted(f"the search was {how} before this trial began.")
    process = starter.start(request)
    try:
        with interrupt.forwarding(process.signal):
            status = None
            while status is None:
                status = process.wait(0.5)
                if status is None and lost is not None and lost.is_set():
                    process.signal(signal.SIGKILL)
                    process.wait()
                    return None
    finally:
        if process.returncode is None:  # the worker failed: the trial goes with it
            process.signal(signal.SIGKILL)
            process.wait()
    if status == errors.TrialPreempted.EXIT_CODE or (interrupt.received and status != 0):
        # The trial's process said how it stopped.
        raise errors.TrialPreempted("the trial was stopped by a signal.", reported=True)
    return status


def run_legacy_process(
    launch: Launch,
    plan: Plan,
    number: int,
    hparams: Dict[str, Any],
    *,
    lengths: Optional[Dict[str, Any]],
    latest: Optional[str],
    env: Dict[str, str],
    lost: threading.Event,
) -> TrialResult:
    """One ``model_def:Trial`` trial in a process of its own (``launch``: ``run_trial`` bound
    to the worker's starter and interrupt): its ``TrialResult``, or what it raised."""
    from det_lightning._runner._lease import taken_over

    fd, result_path = tempfile.mkstemp(prefix=f"det-lightning-trial-{number}-", suffix=".json")
    os.close(fd)
    os.unlink(result_path)  # the trial's process writes it whole, at its end
    request = TrialRequest(
        "det_lightning._runner.search._jobs:legacy_job",
        (plan, number, hparams, lengths, latest, result_path),
        str(plan.model_dir),
        env,
        [sys.argv[0]],
    )
    try:
        status = launch(request, lost)
        if status is None:
            raise taken_over(number)
        return read_legacy_result(number, hparams, status, result_path)
    finally:
        pathlib.Path(result_path).unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(rank_main(sys.argv[1:]))
