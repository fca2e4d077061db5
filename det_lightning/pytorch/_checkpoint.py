"""The checkpoint directory, as Determined 0.38.1 writes it, and how we write it safely.

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

``rng_state`` holds ``cpu_rng_state``, ``np_rng_state``, ``random_rng_state`` and, on a GPU,
``gpu_rng_state``. Models are saved without the ``module.`` (DDP) and ``_orig_mod.``
(``torch.compile``) prefixes of their wrappers, and either is accepted on load.

A checkpoint is written into ``.<uuid>.partial`` beside its final place and renamed when
complete, so a crash never leaves a directory that looks whole.
"""

import io
import json
import logging
import os
import pathlib
import pickle
import random
import shutil
import uuid as uuid_lib
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from det_lightning import errors
from det_lightning.pytorch._code import copy_code, main_module_name

logger = logging.getLogger("det_lightning.pytorch")

STATE_DICT_FILE = "state_dict.pth"
STATE_DICT_FILE_DOCS = "state-dict.pth"  # the name Determined's guide uses; accepted on read
TRIAL_STATE_FILE = "trial_state.pkl"
LEGACY_TRIAL_STATE_FILE = "workload_sequencer.pkl"  # Determined <= 0.20
LOCAL_TRIAL_ID = 0  # the trial id Determined gives a trial outside a cluster
LOAD_DATA_FILE = "load_data.json"
METADATA_FILE = "metadata.json"
CODE_DIR = "code"
# Lightning callbacks' state (EarlyStopping's counters, ...), kept out of state_dict.pth so that
# file never needs more than weights_only loading.
LIGHTNING_CALLBACKS_FILE = "lightning_state.pth"
PARTIAL_SUFFIX = ".partial"

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


# ----- RNG state ------------------------------------------------------------------------------
def capture_rng_state(cuda_device: Optional[int] = None) -> Dict[str, Any]:
    """The global RNG states, in Determined's keys, as types ``weights_only`` loading accepts."""
    state: Dict[str, Any] = {
        "cpu_rng_state": torch.random.get_rng_state(),
        "np_rng_state": _tensor_np_state(np.random.get_state()),
        "random_rng_state": random.getstate(),
    }
    if cuda_device is not None and torch.cuda.is_available():
        state["gpu_rng_state"] = torch.cuda.get_rng_state(cuda_device)
    return state


def _tensor_np_state(np_state: Any) -> Tuple[Any, ...]:
    """numpy's ``get_state()`` tuple with its key array as an int64 tensor."""
    kind, key, pos, has_gauss, cached = np_state
    if not isinstance(key, torch.Tensor):
        key = torch.from_numpy(np.asarray(key).astype(np.int64))
    return (str(kind), key, int(pos), int(has_gauss), float(cached))


def safe_rng_state(state: Dict[str, Any]) -> Dict[str, Any]:
    """``state`` (ours or Determined's, which pickles a numpy array) in ``weights_only`` types."""
    safe = dict(state)
    if "np_rng_state" in safe:
        safe["np_rng_state"] = _tensor_np_state(safe["np_rng_state"])
    return safe


def restore_rng_state(state: Dict[str, Any], cuda_device: Optional[int] = None) -> None:
    """Sets the global RNGs from ``capture_rng_state``'s (or Determined's) state."""
    kind, key, *rest = state["np_rng_state"]
    if isinstance(key, torch.Tensor):
        key = key.numpy()
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), *rest))
    version, internal, gauss = state["random_rng_state"]
    random.setstate((version, tuple(internal), gauss))
    torch.random.set_rng_state(state["cpu_rng_state"])
    if cuda_device is not None and torch.cuda.is_available():
        if "gpu_rng_state" in state:
            torch.cuda.set_rng_state(state["gpu_rng_state"], cuda_device)
        else:
            logger.warning("The system has a gpu but no gpu_rng_state exists in the checkpoint.")


# ----- models ---------------------------------------------------------------------------------
def plain_model(model: nn.Module) -> nn.Module:
    """The module inside DDP/DataParallel and ``torch.compile`` wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod  # type: ignore[assignment]
        else:
            return model


def model_state_dicts(models: Iterable[nn.Module]) -> List[Dict[str, Any]]:
    """``models_state_dict``: each model's weights under its plain (unwrapped) keys."""
    return [plain_model(model).state_dict() for model in models]


def load_models(models: List[nn.Module], checkpoint: Dict[str, Any]) -> None:
    """Loads ``models_state_dict`` (or the older single ``model_state_dict``) into ``models``.

    Raises:
        InvalidCheckpointException: the checkpoint's models do not fit ``models``.
    """
    if "model_state_dict" in checkpoint:
        states = [checkpoint["model_state_dict"]]
    else:
        states = list(checkpoint.get(MODELS, []))
    if len(states) != len(models):
        raise errors.InvalidCheckpointException(
            f"The checkpoint has {len(states)} model state dicts but the trial wrapped "
            f"{len(models)} models: it was written by a trial of another shape."
        )
    for idx, (model, state) in enumerate(zip(models, states)):
        _load_model(idx, plain_model(model), state)


def _load_model(idx: int, model: nn.Module, state: Dict[str, Any]) -> None:
    expected = model.state_dict()
    state = _strip_prefixes(state, expected)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    what = f"Model {idx} ({type(model).__name__}) does not match the checkpoint"
    if missing or unexpected:
        raise errors.InvalidCheckpointException(
            f"{what}: missing keys {missing[:8]}, unexpected keys {unexpected[:8]}. The "
            "checkpoint was written by a trial with another model shape."
        )
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise errors.InvalidCheckpointException(f"{what}: {e}") from e


def _strip_prefixes(state: Dict[str, Any], expected: Dict[str, Any]) -> Dict[str, Any]:
    """Drops DDP's ``module.`` and torch.compile's ``_orig_mod.`` (as Determined wrote them for
    wrapped models) when every key has them and the model's own keys do not."""
    for prefix in ("module.", "_orig_mod.", "module."):
        if state and all(k.startswith(prefix) for k in state) and not any(
            k.startswith(prefix) for k in expected
        ):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def load_list(objects: Iterable[Any], states: List[Any], what: str) -> None:
    """Loads ``states`` into ``objects`` (optimizers, schedulers) one to one."""
    objects = list(objects)
    if len(states) != len(objects):
        raise errors.InvalidCheckpointException(
            f"The checkpoint has {len(states)} {what} state dicts but the trial wrapped "
            f"{len(objects)}: it was written by a trial of another shape."
        )
    for obj, state in zip(objects, states):
        obj.load_state_dict(state)


# ----- trial_state.pkl ------------------------------------------------------------------------
def new_trial_state() -> Dict[str, int]:
    """Determined's ``_TrialState`` of a trial that has not trained yet."""
    return {
        "trial_id": LOCAL_TRIAL_ID, "last_ckpt": 0, "step_id": 0, "last_val": 0,
        "batches_trained": 0, "epochs_trained": 0,
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
        "trial_id": old.get("trial_id", 0), "last_ckpt": old.get("last_ckpt", batches),
        "step_id": old.get("step_id", 0), "last_val": old.get("last_val", 0),
        "batches_trained": batches, "epochs_trained": 0,
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
    for relative in (STATE_DICT_FILE, STATE_DICT_FILE_DOCS, "determined/state_dict.pth",
                     "pedl/state_dict.pth", "checkpoint.pt"):
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
    return isinstance(e, pickle.UnpicklingError) and "weights only load failed" in message and (
        "unsupported operand" not in message
    )


def _damaged(path: pathlib.Path, e: Exception) -> errors.InvalidCheckpointException:
    return errors.InvalidCheckpointException(
        f"Cannot load {path}: the file is truncated or damaged ({type(e).__name__}: {e}). "
        "Resume from an earlier checkpoint."
    )


# ----- load_data.json and metadata.json -------------------------------------------------------
def trial_class_spec(trial_cls: type) -> Tuple[str, bool]:
    """``module:QualName`` for the trial class, and whether it lives in the ``__main__`` script.

    For a class in ``__main__`` the module is the script's importable name (``pkg.mod`` under
    ``python -m pkg.mod``, else the file's stem), as Determined guesses it.
    """
    module = trial_cls.__module__
    if module != "__main__":
        return f"{module}:{trial_cls.__qualname__}", False
    return f"{main_module_name()}:{trial_cls.__qualname__}", True


def make_load_data(
    trial_cls: type, hparams: Optional[Dict[str, Any]], exp_conf: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    """The content of ``load_data.json`` for a trial of class ``trial_cls``."""
    spec, in_main = trial_class_spec(trial_cls)
    load_data: Dict[str, Any] = {
        "trial_type": "PyTorchTrial",
        "experiment_config": exp_conf,
        "hparams": hparams,
        "trial_cls_spec": spec,
        "is_trainer": True,
    }
    if in_main:
        load_data["trial_in_main"] = True
    return load_data


def make_metadata(steps_completed: int) -> Dict[str, Any]:
    """The content of ``metadata.json``: Determined's keys plus our version."""
    from det_lightning import __version__

    return {
        "determined_version": DETERMINED_VERSION,
        "det_lightning_version": __version__,
        "steps_completed": int(steps_completed),
        "framework": f"torch-{torch.__version__}",
        "format": "pickle",
    }


def read_metadata(ckpt_dir: pathlib.Path) -> Dict[str, Any]:
    """``metadata.json`` of ``ckpt_dir`` ({} when absent or unreadable)."""
    try:
        content = json.loads((ckpt_dir / METADATA_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def write_json(path: pathlib.Path, content: Any) -> None:
    """Writes ``content`` as JSON, turning numpy and torch scalars into numbers."""
    path.write_text(json.dumps(content, default=_json_default, indent=2))


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic,)):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


# ----- writing --------------------------------------------------------------------------------
def write_files(
    directory: pathlib.Path,
    state_dict: Dict[str, Any],
    trial_state: Dict[str, int],
    load_data: Dict[str, Any],
    code: List[Tuple[pathlib.Path, str]],
    code_skip: List[pathlib.Path],
    lightning_callbacks: Optional[Dict[str, Any]] = None,
    metadata: Optional[Dict[str, Any]] = None,
) -> None:
    """The files of one checkpoint, in ``directory``.

    Args:
        directory: an empty directory (the partial one ``write_atomically`` renames).
        state_dict: the content of ``state_dict.pth``.
        trial_state: the content of ``trial_state.pkl``; its ``batches_trained`` is
            ``metadata.json``'s ``steps_completed``.
        load_data: the content of ``load_data.json``.
        code: what ``code/`` holds (see ``_code.code_sources``).
        code_skip: directories never copied into ``code/``.
        lightning_callbacks: Lightning callbacks' state, by ``state_key``.
        metadata: more keys for ``metadata.json`` (the searcher metric, the trial's run).
    """
    torch.save(state_dict, str(directory / STATE_DICT_FILE))
    if lightning_callbacks:
        torch.save({"callbacks": lightning_callbacks}, str(directory / LIGHTNING_CALLBACKS_FILE))
    with open(directory / TRIAL_STATE_FILE, "wb") as f:
        pickle.dump({k: int(v) for k, v in trial_state.items()}, f)
    write_json(directory / LOAD_DATA_FILE, load_data)
    write_json(
        directory / METADATA_FILE, {**make_metadata(trial_state["batches_trained"]), **(metadata or {})}
    )
    copy_code(code, directory / CODE_DIR, code_skip)


# ----- atomic writing -------------------------------------------------------------------------
def write_atomically(
    root: pathlib.Path, uuid: str, write: Callable[[pathlib.Path], None]
) -> pathlib.Path:
    """Calls ``write(tmp_dir)`` and renames the finished directory to ``root/uuid``.

    Raises:
        FileExistsError: ``root/uuid`` exists already (it is left alone).
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / uuid
    partial = root / f".{uuid}{PARTIAL_SUFFIX}"
    if final.exists() or partial.exists():
        raise FileExistsError(f"Checkpoint {final} already exists; not overwriting it.")
    partial.mkdir()
    try:
        write(partial)
        _fsync_tree(partial)
        os.replace(partial, final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    _fsync_dir(root)
    return final


def _fsync_tree(path: pathlib.Path) -> None:
    for entry in path.iterdir():
        if entry.is_file() and entry.suffix in (".pth", ".pkl", ".json"):
            with open(entry, "rb") as f:
                os.fsync(f.fileno())


def _fsync_dir(path: pathlib.Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def remove_partials(root: pathlib.Path) -> List[pathlib.Path]:
    """Deletes unfinished checkpoint directories a crash left behind; returns them."""
    removed = []
    if root.is_dir():
        for entry in root.iterdir():
            if entry.name.startswith(".") and entry.name.endswith(PARTIAL_SUFFIX):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def is_complete(path: pathlib.Path) -> bool:
    """Whether ``path`` is a finished checkpoint (never a partial one)."""
    has_state = any((path / name).is_file() for name in (STATE_DICT_FILE, STATE_DICT_FILE_DOCS))
    return path.is_dir() and has_state and (path / METADATA_FILE).is_file()


def latest_checkpoint(root: pathlib.Path) -> Optional[pathlib.Path]:
    """The complete checkpoint under ``root`` with the most batches trained (newest on ties)."""
    best: Optional[pathlib.Path] = None
    best_key = (-1, -1.0)
    if not root.is_dir():
        return None
    for entry in root.iterdir():
        if entry.name.startswith(".") or not is_complete(entry):
            continue
        try:
            steps = int(json.loads((entry / METADATA_FILE).read_text())["steps_completed"])
        except (ValueError, KeyError, OSError):
            continue
        key = (steps, entry.stat().st_mtime)
        if key > best_key:
            best, best_key = entry, key
    return best
