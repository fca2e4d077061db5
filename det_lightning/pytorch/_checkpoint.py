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
      code/             the trial's source directory, for importing the trial class

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
import sys
import uuid as uuid_lib
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np
import torch

from det_lightning import errors

logger = logging.getLogger("det_lightning.pytorch")

STATE_DICT_FILE = "state_dict.pth"
STATE_DICT_FILE_DOCS = "state-dict.pth"  # the name Determined's guide uses; accepted on read
TRIAL_STATE_FILE = "trial_state.pkl"
LOAD_DATA_FILE = "load_data.json"
METADATA_FILE = "metadata.json"
CODE_DIR = "code"
PARTIAL_SUFFIX = ".partial"

MODELS = "models_state_dict"
OPTIMIZERS = "optimizers_state_dict"
LR_SCHEDULERS = "lr_schedulers_state_dict"
CALLBACKS = "callbacks"
RNG_STATE = "rng_state"
SCALER = "scaler_state_dict"
EXTRA = "det_lightning"  # our additions (data order state); Determined ignores unknown keys

DETERMINED_VERSION = "0.38.1"
MAX_CODE_FILE_BYTES = 1 << 20


def new_uuid() -> str:
    return str(uuid_lib.uuid4())


# ----- RNG state ------------------------------------------------------------------------------
def capture_rng_state(cuda_device: Optional[int] = None) -> Dict[str, Any]:
    """The global RNG states, in Determined's keys, as types ``weights_only`` loading accepts."""
    kind, key, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    state: Dict[str, Any] = {
        "cpu_rng_state": torch.random.get_rng_state(),
        "np_rng_state": (kind, torch.from_numpy(key.astype(np.int64)), int(pos), int(has_gauss),
                         float(cached)),
        "random_rng_state": random.getstate(),
    }
    if cuda_device is not None and torch.cuda.is_available():
        state["gpu_rng_state"] = torch.cuda.get_rng_state(cuda_device)
    return state


def restore_rng_state(state: Dict[str, Any], cuda_device: Optional[int] = None) -> None:
    """Sets the global RNGs from ``capture_rng_state``'s (or Determined's) state."""
    np_state = state["np_rng_state"]
    np_key = np_state[1]
    if isinstance(np_key, torch.Tensor):
        np_key = np_key.numpy()
    np.random.set_state((np_state[0], np.asarray(np_key, dtype=np.uint32), *np_state[2:]))
    random_state = state["random_rng_state"]
    random.setstate((random_state[0], tuple(random_state[1]), random_state[2]))
    torch.random.set_rng_state(state["cpu_rng_state"])
    if cuda_device is not None and torch.cuda.is_available():
        if "gpu_rng_state" in state:
            torch.cuda.set_rng_state(state["gpu_rng_state"], cuda_device)
        else:
            logger.warning("The system has a gpu but no gpu_rng_state exists in the checkpoint.")


# ----- trial_state.pkl ------------------------------------------------------------------------
def new_trial_state() -> Dict[str, int]:
    return {
        "trial_id": 0, "last_ckpt": 0, "step_id": 0, "last_val": 0,
        "batches_trained": 0, "epochs_trained": 0,
    }


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds dicts, lists and numbers only: a checkpoint's pickle cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"{TRIAL_STATE_FILE} refers to {module}.{name}; only plain data is accepted."
        )


def read_trial_state(ckpt_dir: pathlib.Path) -> Optional[Dict[str, int]]:
    path = ckpt_dir / TRIAL_STATE_FILE
    if not path.exists():
        return None
    try:
        state = _PlainDataUnpickler(io.BytesIO(path.read_bytes())).load()
    except Exception as e:
        raise errors.InvalidCheckpointException(
            f"Cannot read {path}: {e}. The checkpoint is damaged; resume from an earlier one."
        ) from e
    if not isinstance(state, dict) or "batches_trained" not in state:
        raise errors.InvalidCheckpointException(f"{path} holds no trial state.")
    return state


# ----- state_dict.pth -------------------------------------------------------------------------
def find_state_dict_file(ckpt_dir: pathlib.Path) -> pathlib.Path:
    """``state_dict.pth`` (or the names older Determined versions and its docs used)."""
    for relative in (STATE_DICT_FILE, STATE_DICT_FILE_DOCS, "determined/state_dict.pth",
                     "pedl/state_dict.pth", "checkpoint.pt"):
        candidate = ckpt_dir / relative
        if candidate.exists():
            return candidate
    if not ckpt_dir.exists():
        raise errors.InvalidCheckpointException(
            f"Checkpoint directory {ckpt_dir} does not exist. Pass the path of a checkpoint "
            "directory (the one holding state_dict.pth) or a UUID under the checkpoint directory."
        )
    raise errors.InvalidCheckpointException(
        f"Checkpoint directory {ckpt_dir} has no {STATE_DICT_FILE}; it holds "
        f"{sorted(p.name for p in ckpt_dir.iterdir())[:10]}. Is it a complete checkpoint?"
    )


def read_state_dict(ckpt_dir: pathlib.Path, **torch_load_kwargs: Any) -> Dict[str, Any]:
    """Loads ``state_dict.pth`` on the CPU, with ``weights_only=True`` unless told otherwise."""
    path = find_state_dict_file(ckpt_dir)
    kwargs = {"map_location": "cpu", "weights_only": True, **torch_load_kwargs}
    try:
        checkpoint = torch.load(str(path), **kwargs)
    except pickle.UnpicklingError as e:
        if kwargs.get("weights_only"):
            raise errors.InvalidCheckpointException(
                f"{path} holds objects that torch.load(weights_only=True) refuses to build (a "
                "checkpoint written by Determined itself pickles numpy RNG state, for example). "
                "If you trust this file, load it with torch_load_kwargs={'weights_only': False} "
                f"(or fit(..., latest_checkpoint=...) with trust_checkpoint=True). Details: {e}"
            ) from e
        raise _damaged(path, e) from e
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise _damaged(path, e) from e
    if not isinstance(checkpoint, dict):
        raise errors.InvalidCheckpointException(
            f"{path} holds a {type(checkpoint).__name__}, not Determined's state dict."
        )
    return checkpoint


def _damaged(path: pathlib.Path, e: Exception) -> errors.InvalidCheckpointException:
    return errors.InvalidCheckpointException(
        f"Cannot load {path}: the file is truncated or damaged ({type(e).__name__}: {e}). "
        "Resume from an earlier checkpoint."
    )


def load_models(models: List[torch.nn.Module], checkpoint: Dict[str, Any]) -> None:
    """Loads ``models_state_dict`` (or the older single ``model_state_dict``) into ``models``."""
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
        state = _match_prefix(state, model.state_dict())
        missing, unexpected = _key_mismatch(model.state_dict(), state)
        if missing or unexpected:
            raise errors.InvalidCheckpointException(
                f"Model {idx} ({type(model).__name__}) does not match the checkpoint: missing "
                f"keys {missing[:8]}, unexpected keys {unexpected[:8]}. The checkpoint was "
                "written by a trial with another model shape."
            )
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            raise errors.InvalidCheckpointException(
                f"Model {idx} ({type(model).__name__}) does not match the checkpoint: {e}"
            ) from e


def _key_mismatch(expected: Dict[str, Any], given: Dict[str, Any]) -> "tuple[List, List]":
    return sorted(set(expected) - set(given)), sorted(set(given) - set(expected))


def _match_prefix(state: Dict[str, Any], expected: Dict[str, Any]) -> Dict[str, Any]:
    """Drops DDP's ``module.`` (and torch.compile's ``_orig_mod.``) when our model lacks them."""
    for prefix in ("module.", "_orig_mod."):
        if state and all(k.startswith(prefix) for k in state) and not any(
            k.startswith(prefix) for k in expected
        ):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def load_list(objects: Iterable[Any], states: List[Any], what: str) -> None:
    objects = list(objects)
    if len(states) != len(objects):
        raise errors.InvalidCheckpointException(
            f"The checkpoint has {len(states)} {what} state dicts but the trial wrapped "
            f"{len(objects)}: it was written by a trial of another shape."
        )
    for obj, state in zip(objects, states):
        obj.load_state_dict(state)


# ----- writing --------------------------------------------------------------------------------
def write_json(path: pathlib.Path, content: Any) -> None:
    path.write_text(json.dumps(content, default=_json_default, indent=2))


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic,)):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def trial_class_spec(trial_cls: type) -> "tuple[str, bool]":
    """``module:QualName`` for the trial class, and whether it lives in the ``__main__`` script."""
    module = trial_cls.__module__
    if module != "__main__":
        return f"{module}:{trial_cls.__qualname__}", False
    main_file = getattr(sys.modules["__main__"], "__file__", None)
    stem = pathlib.Path(main_file).stem if main_file else ""
    return f"{stem}:{trial_cls.__qualname__}", True


def source_dir(trial_cls: type) -> Optional[pathlib.Path]:
    """What ``code/`` needs to import the trial class: the top-level package holding its
    module, or, for a top-level module (``model_def.py``), the directory holding it."""
    module = sys.modules.get(trial_cls.__module__)
    module_file = getattr(module, "__file__", None)
    if not module_file:
        return None
    path = pathlib.Path(module_file).resolve().parent
    for _ in range(trial_cls.__module__.count(".") - 1):
        path = path.parent
    return path


def copy_code(src: Optional[pathlib.Path], dest: pathlib.Path, skip: Iterable[pathlib.Path]) -> None:
    """Copies the trial's source tree to ``dest``, never descending into ``skip`` (the
    checkpoint and log directories), caches, virtual environments or large files."""
    dest.mkdir(parents=True, exist_ok=True)
    if src is None or not src.is_dir():
        return
    if (src / "__init__.py").exists():
        dest = dest / src.name  # a package keeps its name, so `import pkg.module` works
    skip_resolved = {p.resolve() for p in skip}
    large: List[str] = []

    def ignore(directory: str, names: List[str]) -> List[str]:
        ignored = []
        for name in names:
            full = pathlib.Path(directory, name)
            if name.startswith(".") or name in ("__pycache__", "venv", "node_modules") or (
                full.resolve() in skip_resolved
            ) or (full.is_dir() and (full / "pyvenv.cfg").exists()):
                ignored.append(name)
            elif full.is_file() and full.stat().st_size > MAX_CODE_FILE_BYTES:
                large.append(str(full.relative_to(src)))
                ignored.append(name)
        return ignored

    shutil.copytree(src, dest, ignore=ignore, dirs_exist_ok=True, symlinks=True)
    if large:
        logger.warning(
            f"Not copied into the checkpoint's code/ (over {MAX_CODE_FILE_BYTES >> 20} MiB): "
            f"{large[:5]}{' ...' if len(large) > 5 else ''}"
        )


def write_atomically(
    root: pathlib.Path, uuid: str, write: Callable[[pathlib.Path], None]
) -> pathlib.Path:
    """Calls ``write(tmp_dir)`` and renames the finished directory to ``root/uuid``."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / uuid
    partial = root / f".{uuid}{PARTIAL_SUFFIX}"
    if final.exists():
        raise FileExistsError(f"Checkpoint {final} already exists; not overwriting it.")
    shutil.rmtree(partial, ignore_errors=True)
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
        pass
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
    return path.is_dir() and (path / STATE_DICT_FILE).is_file() and (path / METADATA_FILE).is_file()


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
