"""``determined.util``: the helpers trials and their scripts import from it.

The harness-internal rest (``check_sshd``, ``write_user_code``, metric plumbing) raises
``errors.NotProvidedError`` saying why (``det_lightning/_refused.py``).
"""

import contextlib
import copy
import errno
import importlib
import inspect
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

from det_lightning import errors
from det_lightning._refused import module_getattr

logger = logging.getLogger("det_lightning")

__getattr__ = module_getattr(__name__)


def rmtree_nfs_safe(
    path: Union[str, "os.PathLike[str]"],
    ignore_errors: bool = False,
    onerror: Optional[Callable[[Any, Any, Any], Any]] = None,
) -> None:
    """``shutil.rmtree``, tried again (up to 5 times) when NFS reports a directory not empty."""
    for attempt in range(1, 6):
        try:
            shutil.rmtree(path, ignore_errors=ignore_errors, onerror=onerror)
            return
        except OSError as e:
            if e.errno != errno.ENOTEMPTY or attempt == 5:
                raise
            logger.debug("rmtree(%s) failed (%s); retrying (attempt %d)", path, e, attempt)
            time.sleep(2**attempt / 100)


def download_gcs_blob_with_backoff(blob: Any, n_retries: int = 32, max_backoff: int = 32) -> Any:
    """``blob.download_as_string()``, retried ``n_retries`` times with exponential backoff.

    The jitter draws from ``random``, whose state is put back afterwards (as in Determined), so
    a data download leaves the trial's random stream where it was.

    Raises:
        ModuleNotFoundError: google-cloud-storage is not installed (the message says how).
        TypeError: ``blob`` is not a ``google.cloud.storage.Blob``.
        RuntimeError: every attempt failed.
    """
    try:
        storage = importlib.import_module("google.cloud.storage")
    except ImportError:
        raise ModuleNotFoundError(
            "download_gcs_blob_with_backoff() needs google-cloud-storage: "
            "`pip install google-cloud-storage` (or `pip install 'det_lightning[gcs]'`).",
            name="google.cloud.storage",
        ) from None
    if not isinstance(blob, storage.Blob):
        raise TypeError(
            f"download_gcs_blob_with_backoff(blob) takes a google.cloud.storage.Blob, got "
            f"{type(blob).__name__}: bucket.blob('path/in/bucket')."
        )
    state = random.getstate()
    try:
        for attempt in range(n_retries):
            try:
                return blob.download_as_string()
            except Exception as e:  # any failure is retried, as in Determined
                logger.debug("downloading %s failed (%s); retrying", blob.name, e)
                time.sleep(min(2**attempt + random.random(), max_backoff))
    finally:
        random.setstate(state)
    raise RuntimeError(f"Max retries exceeded for downloading blob {blob.name!r}.")


def is_overridden(full_method: Any, parent_class: type) -> bool:
    """Whether a bound method comes from a class other than ``parent_class`` (a non-callable,
    such as an attribute shadowing the method, counts as not overridden).

    >>> class A:
    ...     def f(self): pass
    >>> class B(A):
    ...     def f(self): pass
    >>> is_overridden(B().f, A), is_overridden(A().f, A)
    (True, False)
    """
    if not callable(full_method):
        return False
    return bool(full_method.__qualname__.partition(".")[0] != parent_class.__name__)


def has_param(fn: Callable[..., Any], name: str, pos: Optional[int] = None) -> bool:
    """Whether ``fn`` has a positional-or-keyword parameter ``name`` (or ``pos`` of them).

    >>> has_param(lambda a, b: None, "b"), has_param(lambda a: None, "x", 0)
    (True, True)
    """
    params = inspect.getfullargspec(fn).args
    if name in params:
        return True
    return pos is not None and pos < len(params)


def get_member_func(obj: Any, func_name: str) -> Any:
    """``obj.func_name`` if it is callable, else None."""
    member = getattr(obj, func_name, None)
    return member if callable(member) else None


def merge_dicts(base_dict: Dict[Any, Any], source_dict: Dict[Any, Any]) -> Dict[Any, Any]:
    """A new dict: ``source_dict`` merged into a deep copy of ``base_dict``, nested dicts merged.

    >>> merge_dicts({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}, "c": 4})
    {'a': {'x': 1, 'y': 3}, 'b': 1, 'c': 4}
    """
    merged = copy.deepcopy(base_dict)
    for key, value in source_dict.items():
        if key in base_dict and isinstance(value, dict):
            merged[key] = merge_dicts(base_dict[key], value)
        else:
            merged[key] = value
    return merged


def filter_duplicates(
    in_list: List[Any], sorter: Callable[[List[Any]], List[Any]] = sorted
) -> Set[Any]:
    """The items that appear more than once (adjacent after ``sorter``).

    >>> sorted(filter_duplicates([3, 1, 3, 2, 1]))
    [1, 3]
    """
    ordered = sorter(in_list)
    return {b for a, b in zip(ordered, ordered[1:]) if a == b}


def humanize_float(n: float) -> float:
    """``n`` rounded to at least 4 significant digits, never rounding the integer part.

    >>> humanize_float(1.33333333), humanize_float(3333.3333)
    (1.333, 3333.0)
    """
    if n == 0 or not math.isfinite(n):
        return n
    digits = int(math.ceil(math.log10(abs(n))))
    return round(n, max(digits, 4) - digits)


def calculate_batch_sizes(
    hparams: Dict[str, Any], slots_per_trial: int, trialname: str
) -> Tuple[int, int]:
    """``(per-slot batch size, effective global batch size)`` from ``global_batch_size``.

    Raises:
        errors.InvalidExperimentException: ``global_batch_size`` is missing, not an integer or
            smaller than the number of slots.
    """
    slots = max(slots_per_trial, 1)
    size = hparams.get("global_batch_size")
    if "global_batch_size" not in hparams:
        raise errors.InvalidExperimentException(
            "Please specify an integer `global_batch_size` hyperparameter in your experiment "
            f"config.  It is a required hyperparameter for {trialname}-based training."
        )
    if not isinstance(size, int):
        raise errors.InvalidExperimentException(
            "The `global_batch_size` hyperparameter must be an integer value, not "
            f"{type(size).__name__}"
        )
    if size < slots:
        raise errors.InvalidExperimentException(
            f"Please set the `global_batch_size` hyperparameter to be greater or equal to the "
            f"number of slots. Current batch_size: {size}, slots_per_trial: {slots}."
        )
    from det_lightning.pytorch._context import calculate_batch_sizes as split  # warns if uneven

    return split(hparams, slots)


def force_create_symlink(src: str, dst: str) -> None:
    """Makes ``src`` (a directory) and points ``dst`` at it, replacing whatever ``dst`` was."""
    os.makedirs(src, exist_ok=True)
    if os.path.lexists(dst):
        if os.path.islink(dst) or os.path.isfile(dst):
            os.unlink(dst)
        else:
            rmtree_nfs_safe(dst)
    with contextlib.suppress(FileExistsError):  # another worker made it first
        os.symlink(src, dst, target_is_directory=True)


_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGWINCH")


@contextlib.contextmanager
def forward_signals(
    p: "subprocess.Popen[Any]", *signums: signal.Signals, signal_children: bool = False
) -> Iterator[None]:
    """Inside the block, the signals (default: INT, TERM, HUP, USR1, USR2, WINCH) received by
    this process are sent on to ``p``; the previous handlers come back afterwards.

    Raises:
        errors.NotProvidedError: ``signal_children=True`` (signal the process group instead).
    """
    if signal_children:
        raise errors.NotProvidedError(
            "forward_signals(signal_children=True) is not provided by det_lightning: start the "
            "child with start_new_session=True and signal its group (os.killpg)."
        )
    chosen = signums or tuple(getattr(signal, n) for n in _FORWARDED if hasattr(signal, n))
    previous = {num: signal.signal(num, lambda num, _frame: p.send_signal(num)) for num in chosen}
    try:
        yield
    finally:
        for num, handler in previous.items():
            signal.signal(num, handler)


def is_numerical_scalar(n: Any) -> bool:
    """Whether ``n`` is a number TensorBoard can plot: a Python or numpy number, or a
    0-dimensional numeric array.

    >>> import numpy as np
    >>> [is_numerical_scalar(v) for v in (1, np.float32(2), np.array(3.0), np.zeros(2), "4")]
    [True, True, True, False, False]
    """
    import numpy as np

    if isinstance(n, (int, float, np.number)):
        return True
    return isinstance(n, np.ndarray) and n.ndim == 0 and np.issubdtype(n.dtype, np.number)


__all__ = [
    "calculate_batch_sizes",
    "download_gcs_blob_with_backoff",
    "filter_duplicates",
    "force_create_symlink",
    "forward_signals",
    "get_member_func",
    "has_param",
    "humanize_float",
    "is_numerical_scalar",
    "is_overridden",
    "logger",
    "merge_dicts",
    "rmtree_nfs_safe",
]
