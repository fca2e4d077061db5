"""The checkpoint directory, as Determined 0.38.1 writes it, and how we read it.

One directory per checkpoint, named by a UUID::

    <uuid>/
      state_dict.pth    torch.save of {models_state_dict, optimizers_state_dict,
                        lr_schedulers_state_dict, callbacks, rng_state[, scaler_state_dict],
                        det_lightning}; loadable with torch.load(weights_only=True)
      trial_state.pkl   pickled dict: trial_id, last_ckpt, step_id, last_val, batches_trained,
                        epochs_trained (read back with an unpickler that only builds plain data)
      load_data.json    trial_type, experiment_config, hparams, trial_cls_spec, is_trainer
                        [, trial_in_main]
      metadata.json     steps_completed, framework, format, determined_version, det_lightning_version
      code/             the trial's source (its top-level package, or its script's directory)
      lightning_state.pth   Lightning callbacks' state, when they have any (ours only)

This module names the files and keys and reads them back; ``_state_dicts`` holds what goes into
``models_state_dict`` and ``rng_state``, ``_checkpoint_write`` writes the files, and
``_local_store`` writes a directory (into ``.<uuid>.partial``, renamed when complete, so a
directory that looks whole is whole) and deletes one (renamed to ``.<uuid>.deleting`` first, so
a killed deletion leaves no broken checkpoint under its name). Where checkpoints live, a
directory or a bucket, is a ``_store.CheckpointStore``.
"""

import io
import json
import pathlib
import pickle
import re
import uuid as uuid_lib
from typing import Any, Collection, Dict, List, NamedTuple, Optional, Tuple

import torch

from det_lightning import errors

STATE_DICT_FILE = "state_dict.pth"
STATE_DICT_FILE_DOCS = "state-dict.pth"  # the name Determined's guide uses; accepted on read
TRIAL_STATE_FILE = "trial_state.pkl"
LEGACY_TRIAL_STATE_FILE = "workload_sequencer.pkl"  # Determined <= 0.20
LOCAL_TRIAL_ID = 0  # the trial id Determined gives a trial outside a cluster
LOAD_DATA_FILE = "load_data.json"
METADATA_FILE = "metadata.json"
WRITER_KEY = "det_lightning_version"  # metadata.json of a checkpoint a Trainer wrote here
CODE_DIR = "code"
# Lightning callbacks' state (EarlyStopping's counters, ...), kept out of state_dict.pth so that
# file never needs more than weights_only loading.
LIGHTNING_CALLBACKS_FILE = "lightning_state.pth"
PARTIAL_SUFFIX = ".partial"  # .<uuid>.partial: a checkpoint being written
# <name>/.outputs: a folder of files that are not a checkpoint (``CheckpointStore.outputs``):
# never listed as a damaged checkpoint, never swept
OUTPUTS_MARKER = ".outputs"
DELETING_SUFFIX = ".deleting"  # .<uuid>.deleting: a checkpoint being deleted
UNKEPT_SUFFIX = ".unkept"  # .<uuid>.unkept: retention gave <uuid> up; deleted until gone
UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

MODELS = "models_state_dict"
OPTIMIZERS = "optimizers_state_dict"
LR_SCHEDULERS = "lr_schedulers_state_dict"
CALLBACKS = "callbacks"
RNG_STATE = "rng_state"
SCALER = "scaler_state_dict"
EXTRA = "det_lightning"  # our additions (data order state); Determined ignores unknown keys

# What a Lightning ``.ckpt`` of a ``TrialModule`` carries besides Lightning's own keys.
LIGHTNING_STATE_KEY = "det_lightning_state_dict"  # the state_dict.pth content
LIGHTNING_TRIAL_STATE_KEY = "det_lightning_trial_state"  # the trial_state.pkl content
LIGHTNING_LOAD_DATA_KEY = "det_lightning_load_data"  # the load_data.json content
MODEL_PREFIX = "wrapped_models."  # TrialModule keeps the trial's models in a ModuleList

DETERMINED_VERSION = "0.38.1"


def new_uuid() -> str:
    """A fresh checkpoint name."""
    return str(uuid_lib.uuid4())


# ----- trial_state.pkl ------------------------------------------------------------------------
def new_trial_state() -> Dict[str, int]:
    """Determined's ``_TrialState`` of a trial that has not trained yet."""
    return {
        "trial_id": LOCAL_TRIAL_ID,
        "last_ckpt": 0,
        "step_id": 0,
        "last_val": 0,
        "batches_trained": 0,
        "epochs_trained": 0,
    }


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds dicts, lists and numbers only: a checkpoint's pickle cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"{TRIAL_STATE_FILE} refers to {module}.{name}; only plain data is accepted."
        )


def read_trial_state(ckpt_dir: pathlib.Path) -> Optional[Dict[str, int]]:
    """``trial_state.pkl`` of ``ckpt_dir``, or the ``workload_sequencer.pkl`` of Determined
    0.20 and older in its terms (None when there is neither).

    Raises:
        InvalidCheckpointException: the file is damaged or holds anything but plain data.
    """
    path = ckpt_dir / TRIAL_STATE_FILE
    if path.exists():
        state = _read_plain_dict(path)
        if "batches_trained" not in state:
            raise errors.InvalidCheckpointException(f"{path} holds no trial state.")
        return state
    legacy = ckpt_dir / LEGACY_TRIAL_STATE_FILE
    if not legacy.exists():
        return None
    old = _read_plain_dict(legacy)
    # 0.20 counts batches as steps_completed, 0.17 as latest_batch. Its epoch count was never
    # saved (Determined derives it from the epoch length); a warm start does not need it.
    batches = old.get("steps_completed", old.get("latest_batch"))
    if not isinstance(batches, int):
        raise errors.InvalidCheckpointException(f"{legacy} holds no batch count.")
    return {
        "trial_id": old.get("trial_id", 0),
        "last_ckpt": old.get("last_ckpt", batches),
        "step_id": old.get("step_id", 0),
        "last_val": old.get("last_val", 0),
        "batches_trained": batches,
        "epochs_trained": 0,
    }


def _read_plain_dict(path: pathlib.Path) -> Dict[str, Any]:
    try:
        state = _PlainDataUnpickler(io.BytesIO(path.read_bytes())).load()
    except Exception as e:
        raise errors.InvalidCheckpointException(
            f"Cannot read {path}: {e}. The checkpoint is damaged; resume from an earlier one."
        ) from e
    if not isinstance(state, dict):
        raise errors.InvalidCheckpointException(f"{path} holds no trial state.")
    return state


def is_same_trial(trial_state: Dict[str, Any]) -> bool:
    """Whether a checkpoint's trial state continues this trial, as Determined decides: its
    ``trial_id`` is ours (0, a local trial's). A cluster trial's checkpoint is a warm start.

    >>> is_same_trial(new_trial_state()), is_same_trial({**new_trial_state(), "trial_id": 62})
    (True, False)
    """
    return trial_state.get("trial_id") == LOCAL_TRIAL_ID


# ----- state_dict.pth -------------------------------------------------------------------------
def find_state_dict_file(ckpt_dir: pathlib.Path) -> pathlib.Path:
    """``state_dict.pth`` (or the names older Determined versions and its docs used).

    Raises:
        InvalidCheckpointException: ``ckpt_dir`` does not exist or holds no state dict.
    """
    for relative in (
        STATE_DICT_FILE,
        STATE_DICT_FILE_DOCS,
        "determined/state_dict.pth",
        "pedl/state_dict.pth",
        "checkpoint.pt",
    ):
        candidate = ckpt_dir / relative
        if candidate.is_file():
            return candidate
    if not ckpt_dir.is_dir():
        raise errors.InvalidCheckpointException(
            f"Checkpoint directory {ckpt_dir} does not exist. Pass the path of a checkpoint "
            "directory (the one holding state_dict.pth) or a UUID under the checkpoint directory."
        )
    raise errors.InvalidCheckpointException(
        f"Checkpoint directory {ckpt_dir} has no {STATE_DICT_FILE}; it holds "
        f"{sorted(p.name for p in ckpt_dir.iterdir())[:10]}. Is it a complete checkpoint?"
    )


def read_state_dict(ckpt_dir: pathlib.Path, **torch_load_kwargs: Any) -> Dict[str, Any]:
    """Loads ``state_dict.pth`` on the CPU, with ``weights_only=True`` unless told otherwise.

    Raises:
        InvalidCheckpointException: the file is missing, truncated, or needs full unpickling.
    """
    path = find_state_dict_file(ckpt_dir)
    kwargs = {"map_location": "cpu", "weights_only": True, **torch_load_kwargs}
    try:
        checkpoint = torch.load(str(path), **kwargs)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:
        if kwargs.get("weights_only") and refused_by_weights_only(e):
            raise errors.InvalidCheckpointException(
                f"{path} holds objects that torch.load(weights_only=True) refuses to build (a "
                "checkpoint written by Determined itself pickles numpy RNG state, for example). "
                "If you trust this file, load it with torch_load_kwargs={'weights_only': False}. "
                f"Details: {e}"
            ) from e
        raise _damaged(path, e) from e
    if not isinstance(checkpoint, dict):
        raise errors.InvalidCheckpointException(
            f"{path} holds a {type(checkpoint).__name__}, not Determined's state dict."
        )
    return checkpoint


def refused_by_weights_only(e: BaseException) -> bool:
    """Whether ``torch.load`` failed because ``weights_only`` refused an object (a readable
    file), rather than because the file is damaged."""
    message = str(e).lower()
    # A file that is not a pickle at all fails in the weights-only unpickler too, on an opcode.
    return (
        isinstance(e, pickle.UnpicklingError)
        and "weights only load failed" in message
        and ("unsupported operand" not in message)
    )


def _damaged(path: pathlib.Path, e: Exception) -> errors.InvalidCheckpointException:
    return errors.InvalidCheckpointException(
        f"Cannot load {path}: the file is truncated or damaged ({type(e).__name__}: {e}). "
        "Resume from an earlier checkpoint."
    )


# ----- metadata.json and the checkpoint root --------------------------------------------------
def read_metadata(ckpt_dir: pathlib.Path) -> Dict[str, Any]:
    """``metadata.json`` of ``ckpt_dir`` ({} when absent or unreadable)."""
    try:
        content = json.loads((ckpt_dir / METADATA_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def lacking(names: Collection[str], metadata: Optional[Dict[str, Any]]) -> List[str]:
    """What a checkpoint directory holding the files ``names`` lacks to be complete: its
    ``state_dict.pth``, a ``metadata.json`` with ``steps_completed`` (``metadata``: its
    content, None when unreadable), and, for one we wrote, its trial state ([]: complete).

    >>> lacking(["state_dict.pth", "metadata.json", "trial_state.pkl"], {"steps_completed": 4})
    []
    >>> lacking(["metadata.json"], {"steps_completed": 4, "det_lightning_version": "1"})
    ['state_dict.pth', 'trial_state.pkl']
    """
    missing = []
    if not {STATE_DICT_FILE, STATE_DICT_FILE_DOCS} & set(names):
        missing.append(STATE_DICT_FILE)
    if METADATA_FILE not in names:
        missing.append(METADATA_FILE)
    elif not isinstance((metadata or {}).get("steps_completed"), int):
        missing.append(f"{METADATA_FILE}'s steps_completed")
    written_here = WRITER_KEY in (metadata or {})
    if written_here and not {TRIAL_STATE_FILE, LEGACY_TRIAL_STATE_FILE} & set(names):
        missing.append(TRIAL_STATE_FILE)
    return missing


def lacking_local(path: pathlib.Path) -> List[str]:
    """What the checkpoint directory ``path`` lacks to be complete (see ``lacking``)."""
    names = [p.name for p in path.iterdir() if p.is_file()]
    return lacking(names, read_metadata(path) if METADATA_FILE in names else None)


def is_complete(path: pathlib.Path) -> bool:
    """Whether ``path`` is a finished checkpoint (never a partial one)."""
    return path.is_dir() and not lacking_local(path)


def damaged_local(root: pathlib.Path) -> List[Tuple[pathlib.Path, List[str]]]:
    """The checkpoint directories (UUID-named) under ``root`` that are not complete, each with
    what it lacks: files deleted from a finished checkpoint, or a copy cut short. Unfinished
    writes and deletions have hidden names (``_local_store``) and are never listed."""
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.iterdir()):
        if path.is_dir() and UUID_PATTERN.match(path.name):
            if (path / OUTPUTS_MARKER).exists():
                continue
            try:
                missing = lacking_local(path)
            except FileNotFoundError:
                continue  # deleted while listed
            if missing:
                found.append((path, missing))
    return found


class Listed(NamedTuple):
    """A complete checkpoint under a root: its name (UUID), ``metadata.json``, modified time."""

    name: str
    metadata: Dict[str, Any]
    mtime: float


def list_local(root: pathlib.Path) -> List[Listed]:
    """The complete checkpoints in directory ``root`` (none if it does not exist)."""
    found = []
    if root.is_dir():
        for path in root.iterdir():
            if path.name.startswith("."):
                continue
            try:
                if is_complete(path):
                    found.append(Listed(path.name, read_metadata(path), path.stat().st_mtime))
            except FileNotFoundError:
                continue  # deleted while listed (renamed away at once): as listed a moment later
    return found


def newest(listed: List[Listed]) -> Optional[str]:
    """The name of the checkpoint in ``listed`` with the most batches trained (newest on ties).

    >>> newest([Listed("a", {"steps_completed": 9}, 1.0), Listed("b", {"steps_completed": 3}, 2.0)])
    'a'
    """
    best, best_key = None, (-1, -1.0)
    for entry in listed:
        try:
            key = (int(entry.metadata["steps_completed"]), entry.mtime)
        except (ValueError, KeyError, TypeError):
            continue
        if key > best_key:
            best, best_key = entry.name, key
    return best


def latest_checkpoint(root: pathlib.Path) -> Optional[pathlib.Path]:
    """The complete checkpoint in directory ``root`` with the most batches trained (newest on
    ties); a store of either kind: ``CheckpointStore.latest``."""
    best = newest(list_local(root))
    return None if best is None else root / best


def read_load_data(root: pathlib.Path, name: str) -> Dict[str, Any]:
    """``load_data.json`` of checkpoint ``name`` in ``root`` ({} when absent or unreadable)."""
    try:
        content = json.loads((root / name / LOAD_DATA_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}
