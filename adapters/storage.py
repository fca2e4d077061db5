"""Checkpoint storage problems, reported with the path and the cause.

Before training, ``check_checkpoint_dir`` asks the store (``CheckpointStore.problem``), which
creates the directory and a probe file in it (and deletes the probe), so a missing, read-only or
full directory fails the run before any batch is trained; a URL root (``_remote``) gets a probe
object first (a missing package, bucket or credentials), then a probe file in its local copies'
directory. A write that fails later (the disk filled up) becomes a ``CheckpointStorageError``;
the checkpoint being written is discarded (``write_atomically``), earlier ones stay, and
superseded checkpoints are only deleted after a new one is complete.
"""

import logging
import pathlib
import shutil
from typing import TYPE_CHECKING, Any, Iterable, Optional

import torch

from det_lightning import errors
from det_lightning.pytorch._local_store import describe_os_error, write_probe
from det_lightning.pytorch._store import CheckpointStore

if TYPE_CHECKING:
    from det_lightning.core import DistributedContext

logger = logging.getLogger("det_lightning.pytorch")

# torch.save reports a failed write of its zip container as a RuntimeError naming these.
_TORCH_WRITE_FAILURES = ("inline_container", "PytorchStreamWriter", "file write failed")


def check_checkpoint_dir(
    root: CheckpointStore, distributed: "DistributedContext", models: Iterable[Any]
) -> None:
    """Raises ``CheckpointStorageError`` if checkpoints cannot be written under ``root``.

    The chief (which writes checkpoints) probes; every rank gets the verdict. A URL root is
    probed with an object written and deleted there (the package, the bucket, the
    credentials) before its local copies' directory is touched.
    """
    problem = None
    if distributed.rank == 0:
        problem = root.problem() or space_problem(root.staging(), _state_bytes(models))
    if distributed.size > 1:
        problem = distributed.broadcast(problem)
    if problem is not None:
        raise errors.CheckpointStorageError(problem)


def space_problem(root: pathlib.Path, needed: int) -> Optional[str]:
    """Why a checkpoint of about ``needed`` bytes cannot fit under ``root``, or None."""
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return None
    return too_little_space(root, free, needed)


def too_little_space(root: pathlib.Path, free: int, needed: int) -> Optional[str]:
    """The verdict for ``free`` bytes against a checkpoint of ``needed`` bytes (the weights).

    >>> too_little_space(pathlib.Path("/ckpt"), free=10, needed=100)[:43]
    'Not enough space for a checkpoint in /ckpt:'
    >>> too_little_space(pathlib.Path("/ckpt"), free=1000, needed=100) is None
    True
    """
    if free < needed:
        return (
            f"Not enough space for a checkpoint in {root}: {free} bytes free, the model weights "
            f"alone take {needed}. Nothing was trained. Free some space or choose another "
            "checkpoint_dir."
        )
    if free < 3 * needed:
        # Optimizer state (Adam keeps two tensors per weight) can triple the size.
        logger.warning(
            f"Only {free} bytes free in {root}; a checkpoint of these models with their "
            f"optimizer state may need up to {3 * needed}."
        )
    return None


def _state_bytes(models: Iterable[Any]) -> int:
    return sum(
        t.numel() * t.element_size()
        for model in models
        for t in model.state_dict().values()
        if isinstance(t, torch.Tensor)
    )


def raise_if_storage_error(error: BaseException, path: pathlib.Path) -> None:
    """Re-raises a failed write of checkpoint ``path`` as ``CheckpointStorageError`` (with the
    path and the cause) when the storage caused it; returns for any other error.

    torch.save reports a failed write as a RuntimeError whose text varies, so for those a
    probe write into the directory decides.
    """
    if isinstance(error, errors.CheckpointStorageError):
        return
    if isinstance(error, OSError):
        cause = describe_os_error(error)
    elif isinstance(error, RuntimeError):
        failure = write_probe(path.parent)
        if failure is None and not any(m in str(error) for m in _TORCH_WRITE_FAILURES):
            return
        cause = f"RuntimeError: {error}"
        if failure is not None:
            cause += f"; a test write there fails too with {describe_os_error(failure)}"
    else:
        return
    free = _free_bytes(path.parent)
    raise errors.CheckpointStorageError(
        f"Writing checkpoint {path} failed: {cause}"
        f"{'' if free is None else f' ({free} bytes free)'}. Training stopped; the unfinished "
        f"checkpoint was discarded and earlier complete checkpoints under {path.parent} are "
        "kept. Free space (or fix the directory) and resume with "
        "fit(latest_checkpoint='latest')."
    ) from error


def _free_bytes(path: pathlib.Path) -> Optional[int]:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None
