"""Trains the fixture MLPTrial in its own process, for tests that signal or kill it.

Usage: ``python train.py ARGS_JSON``, ARGS_JSON being a file of keyword arguments:

    batches         max_length in batches
    hparams         the trial's hyperparameters
    seed            seeds random/numpy/torch before the trial is built
    fit             extra fit() arguments: {"checkpoint_period": n} (batches)
    signal_at       send this process ``signal`` (a name, default SIGTERM) during batch k
    signal_rank     ... on this rank only (default: every rank)
    devices         processes to train with (Lightning starts the others)
    block_write     block inside the write of the n-th checkpoint (1-based): touch
                    ``marker`` and sleep, so the parent can signal or kill the process then
    block_background  block the background write of the n-th checkpoint (1-based) at its first
                    fsync: announce its partial directory in ``marker`` and wait (training goes
                    on) until the file ``release`` exists, or the parent kills the process
    block_delete    right after the first file a deletion removes from a checkpoint directory,
                    touch this marker file and sleep (the parent kills the process mid-deletion)
    exp_conf        the experiment configuration given to init() (retention counts, ...)
    fsize_after     after the n-th checkpoint, limit files this process writes to
                    ``fsize_limit`` bytes (RLIMIT_FSIZE: a full disk that also fails root)
    fsize_at_save   the same limit, set as the n-th checkpoint is taken: its background write
                    (and no write hook) meets it
    slow_batches    seconds to sleep in each batch
    workers         train with this many DataLoader worker processes
    started         a file touched at the first batch
    shutdown        a file touched by on_trial_shutdown
    out             where to torch.save the final weights

The uncaught ``TrialPreempted`` sets the exit status, as it would in a user's script.
"""

import json
import os
import pathlib
import resource
import signal
import sys
import threading
import time
from typing import Any, Dict, List

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from det_lightning import pytorch  # noqa: E402
from tests.fixtures.trials import make_trials, regression_data, seed_everything  # noqa: E402


def announce(path: Any, text: str) -> None:
    """Writes a marker file the test waits for, whole: the test sees it only once its content
    is there (a plain write_text is visible, empty, from the moment it is opened)."""
    target = pathlib.Path(path)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, target)


class Harness(pytorch.PyTorchCallback):
    """Blocks a checkpoint write, limits file sizes, and records shutdown, as asked."""

    def __init__(self, args: Dict[str, Any]) -> None:
        self.args = args
        self.checkpoints = 0

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        # Runs inside the write, while the checkpoint is still its .<uuid>.partial directory.
        self.checkpoints += 1
        if self.checkpoints == self.args.get("fsize_at_save"):
            limit_file_size(self.args["fsize_limit"])
        if self.checkpoints == self.args.get("block_write"):
            root = pathlib.Path(os.environ.get("DET_LIGHTNING_CHECKPOINT_DIR", "checkpoints"))
            (partial,) = root.glob(".*.partial")
            announce(self.args["marker"], str(partial.resolve()))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the parent signals or kills us meanwhile
                time.sleep(0.05)
            raise RuntimeError("nobody killed the blocked checkpoint write")

    def on_trial_shutdown(self) -> None:
        if self.args.get("shutdown"):
            announce(self.args["shutdown"], "shutdown")


class FileSizeLimit(pytorch.PyTorchCallback):
    """Limits file sizes after the ``fsize_after``-th checkpoint is written. (Only present when
    asked: a callback on the write hooks makes every write synchronous, as in Determined.)"""

    def __init__(self, args: Dict[str, Any]) -> None:
        self.args = args
        self.checkpoints = 0

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.checkpoints += 1
        if self.checkpoints == self.args.get("fsize_after"):
            limit_file_size(self.args["fsize_limit"])


def limit_file_size(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write instead of dying
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def block_background_write(n: int, marker: pathlib.Path, release: pathlib.Path) -> None:
    """Makes the writer thread's first fsync in the n-th partial checkpoint directory announce
    that directory and wait for ``release``."""
    fsync = os.fsync
    partials: List[str] = []

    def fsync_then_block(fd: Any) -> None:
        path = pathlib.Path(os.readlink(f"/proc/self/fd/{fd}"))
        partial = path.parent.name
        if (
            threading.current_thread() is not threading.main_thread()
            and partial.endswith(".partial")
            and partial not in partials
        ):
            partials.append(partial)
            if len(partials) == n:
                announce(marker, str(path.parent))
                deadline = time.monotonic() + 120
                while not release.exists():  # an event the parent makes, or it kills us
                    if time.monotonic() > deadline:
                        raise RuntimeError("nobody released the blocked background write")
                    time.sleep(0.02)
        fsync(fd)

    os.fsync = fsync_then_block  # type: ignore[assignment]


def block_deletions(root: pathlib.Path, marker: pathlib.Path) -> None:
    """Makes the first removal of a file of a checkpoint under ``root`` (not a partial one)
    touch ``marker`` and sleep after it: a deletion caught half done."""
    unlink = os.unlink

    def unlink_then_block(path: Any, *, dir_fd: Any = None) -> None:
        unlink(path, dir_fd=dir_fd)
        where = pathlib.Path(
            os.readlink(f"/proc/self/fd/{dir_fd}")
            if dir_fd is not None
            else os.path.dirname(os.path.abspath(path))
        )
        inside = where != root.resolve() and root.resolve() in where.parents
        if inside and not where.name.endswith(".partial") and not marker.exists():
            announce(marker, str(where))
            time.sleep(120)  # the parent kills us meanwhile
            raise RuntimeError("nobody killed the blocked deletion")

    os.unlink = unlink_then_block  # type: ignore[assignment]


def main(args: Dict[str, Any]) -> None:
    torch.set_num_threads(1)
    if args.get("block_background"):
        block_background_write(
            args["block_background"], pathlib.Path(args["marker"]), pathlib.Path(args["release"])
        )
    if args.get("block_delete"):
        root = pathlib.Path(os.environ.get("DET_LIGHTNING_CHECKPOINT_DIR", "checkpoints"))
        block_deletions(root, pathlib.Path(args["block_delete"]))
    base = make_trials(pytorch)["MLPTrial"]
    signum = getattr(signal, args.get("signal", "SIGTERM"))

    class ScriptTrial(base):  # type: ignore[valid-type, misc]
        def build_callbacks(self) -> Dict[str, Any]:
            limit = {"fsize": FileSizeLimit(args)} if args.get("fsize_after") else {}
            # Not the fixture's recorder: a callback on on_checkpoint_write_end would make every
            # write synchronous (as in Determined), and the drills are for background writes.
            return {"harness": Harness(args), **limit}

        def build_training_data_loader(self) -> Any:
            if not args.get("workers"):
                return super().build_training_data_loader()
            hparams = args.get("hparams", {})
            return pytorch.DataLoader(
                regression_data(hparams.get("n", 64)),
                batch_size=hparams.get("batch_size", 8),
                shuffle=True,
                num_workers=args["workers"],
            )

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            if batch_idx == 0 and args.get("started"):
                announce(args["started"], "started")
            at_rank = args.get("signal_rank", self.context.distributed.rank)
            if batch_idx == args.get("signal_at") and self.context.distributed.rank == at_rank:
                os.kill(os.getpid(), signum)
            time.sleep(args.get("slow_batches", 0))
            return super().train_batch(batch, epoch_idx, batch_idx)

    # The same trial as MLPTrial, instrumented: the tests resume its checkpoints as MLPTrial
    # (``latest`` only resumes the trial class that wrote a checkpoint).
    ScriptTrial.__module__, ScriptTrial.__qualname__ = base.__module__, base.__qualname__
    fit_args: Dict[str, Any] = {
        k: pytorch.Batch(v) if k.endswith("_period") else v for k, v in args.get("fit", {}).items()
    }
    seed_everything(args.get("seed", 3))
    launch = {"devices": args["devices"]} if args.get("devices") else {}
    with pytorch.init(
        hparams=args.get("hparams", {}), exp_conf=args.get("exp_conf"), accelerator="cpu", **launch
    ) as context:
        trial = ScriptTrial(context)
        trainer = pytorch.Trainer(trial, context, logger=False)
        trainer.fit(max_length=pytorch.Batch(args["batches"]), **fit_args)
    if args.get("out"):
        torch.save(trial.model.state_dict(), args["out"])


if __name__ == "__main__":
    import logging

    import det_lightning

    logging.basicConfig(level=logging.INFO, format=det_lightning.LOG_FORMAT)
    main(json.loads(pathlib.Path(sys.argv[1]).read_text()))
