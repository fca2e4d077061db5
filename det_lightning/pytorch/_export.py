"""Lightning ``.ckpt`` files of a trial to Determined checkpoint directories, and back.

In a det_lightning run every Lightning checkpoint of the trial (a ``ModelCheckpoint``'s, or
``trainer.save_checkpoint``'s) carries the Determined state next to Lightning's own keys::

    state_dict                  {"wrapped_models.<i>.<key>": tensor}   the models, Lightning's view
    optimizer_states            [optimizer.state_dict(), ...]
    callbacks                   Lightning callbacks' state (exported as lightning_state.pth)
    det_lightning_state_dict    what state_dict.pth holds (models, optimizers, RNG, data order, ...)
    det_lightning_trial_state   what trial_state.pkl holds (batches_trained, ...)
    det_lightning_load_data     what load_data.json holds (trial class, hparams, config)

:func:`export_lightning_checkpoint` writes such a file as a Determined checkpoint directory,
which ``fit(latest_checkpoint=...)`` resumes exactly and ``load_trial_from_checkpoint_path``
(ours or Determined's) loads. A ``.ckpt`` without the ``det_lightning_*`` keys still exports
its models and optimizers. :func:`to_lightning_checkpoint` goes the other way; its file holds
the same keys, so exporting it again gives back the same checkpoint. It is meant for
``TrialModule.load_state_dict`` and for export, not for ``lightning.Trainer.fit(ckpt_path=...)``
(it has no loop state).

Command line, as ``det-lightning checkpoint ...`` (``main(argv)`` gets the words after
``checkpoint``)::

    export FILE.ckpt [--checkpoint-dir DIR] [--code DIR] [--trust]   prints the new directory
    convert CHECKPOINT_DIR FILE.ckpt [--trust]                       prints FILE.ckpt
"""

import argparse
import os
import pathlib
import pickle
import sys
from typing import Any, Dict, List, Optional, Union

import torch

from det_lightning import errors
from det_lightning._env import CHECKPOINT_DIR_ENV
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint_write import write_files
from det_lightning.pytorch._load import read_load_data
from det_lightning.pytorch._local_store import write_atomically
from det_lightning.pytorch._remote import is_url
from det_lightning.pytorch._state_dicts import safe_rng_state

_Path = Union[str, "os.PathLike[str]"]


def export_lightning_checkpoint(
    ckpt_file: _Path,
    checkpoint_dir: Optional[_Path] = None,
    *,
    code_dir: Optional[_Path] = None,
    trust: bool = False,
) -> pathlib.Path:
    """Writes the Lightning checkpoint ``ckpt_file`` as a Determined checkpoint directory.

    Args:
        ckpt_file: a ``.ckpt`` written for a det_lightning trial.
        checkpoint_dir: where the new ``<uuid>`` directory goes (default
            ``$DET_LIGHTNING_CHECKPOINT_DIR``, else ``./checkpoints``, as ``Trainer``).
        code_dir: the trial's source directory, copied into ``code/`` (default: empty).
        trust: read ``ckpt_file`` with full unpickling (only for files you trust).

    Returns:
        The new checkpoint directory.

    Raises:
        InvalidCheckpointException: ``ckpt_file`` is missing, damaged, or not a trial's.
        NotImplementedError: ``checkpoint_dir`` (or the environment variable) is a URL.
    """
    location = checkpoint_dir or os.environ.get(CHECKPOINT_DIR_ENV) or "checkpoints"
    if is_url(location):
        raise NotImplementedError(
            f"Exporting to {location!s} is not supported: export to a local directory "
            "(checkpoint_dir=..., or `det-lightning checkpoint export FILE.ckpt DIR`) and copy "
            "the <uuid> directory to the bucket, adding the marker <uuid>/.complete last."
        )
    content = _torch_load(pathlib.Path(ckpt_file), trust)
    state = content.get(ckpt.LIGHTNING_STATE_KEY) or _state_from_lightning(content, ckpt_file)
    trial_state = _trial_state(content)
    load_data = content.get(ckpt.LIGHTNING_LOAD_DATA_KEY) or _unknown_load_data(content)
    root = pathlib.Path(location)
    code = [(pathlib.Path(code_dir), "")] if code_dir is not None else []
    callbacks = content.get("callbacks")
    return write_atomically(
        root.absolute(),
        ckpt.new_uuid(),
        lambda tmp: write_files(
            tmp,
            _weights_only_safe(state),
            trial_state,
            load_data,
            code=code,
            code_skip=[root],
            lightning_callbacks=callbacks,
        ),
    )


def to_lightning_checkpoint(
    checkpoint_path: _Path,
    ckpt_file: _Path,
    *,
    trust: bool = False,
) -> pathlib.Path:
    """Writes the Determined checkpoint directory ``checkpoint_path`` as a Lightning ``.ckpt``.

    Args:
        checkpoint_path: a checkpoint directory (ours, or one the real Determined wrote).
        ckpt_file: the file to write; an existing file is never overwritten.
        trust: read ``state_dict.pth`` with full unpickling, which a checkpoint written by
            Determined itself needs (its numpy RNG state). The output loads with
            ``weights_only=True`` either way.

    Returns:
        ``ckpt_file``.

    Raises:
        InvalidCheckpointException: the directory is missing or damaged.
        FileExistsError: ``ckpt_file`` exists.
    """
    source = pathlib.Path(checkpoint_path)
    state = _weights_only_safe(ckpt.read_state_dict(source, weights_only=not trust))
    trial_state = ckpt.read_trial_state(source) or _steps_only_state(source)
    content = _lightning_content(state, trial_state, read_load_data(source))
    out = pathlib.Path(ckpt_file)
    _save_new_file(content, out)
    return out


def _weights_only_safe(state: Dict[str, Any]) -> Dict[str, Any]:
    """``state`` with Determined's numpy RNG state (if any) in types weights_only accepts."""
    if ckpt.RNG_STATE not in state:
        return state
    return {**state, ckpt.RNG_STATE: safe_rng_state(state[ckpt.RNG_STATE])}


def _torch_load(path: pathlib.Path, trust: bool) -> Dict[str, Any]:
    if not path.is_file():
        raise errors.InvalidCheckpointException(f"Lightning checkpoint {path} does not exist.")
    try:
        content = torch.load(str(path), map_location="cpu", weights_only=not trust)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:
        if ckpt.refused_by_weights_only(e):
            raise errors.InvalidCheckpointException(
                f"{path} holds objects that torch.load(weights_only=True) refuses to build. If "
                f"you trust this file, pass trust=True (--trust). Details: {e}"
            ) from e
        raise errors.InvalidCheckpointException(
            f"Cannot load {path}: the file is truncated or damaged ({type(e).__name__}: {e})."
        ) from e
    if not isinstance(content, dict) or "state_dict" not in content:
        raise errors.InvalidCheckpointException(f"{path} is not a Lightning checkpoint.")
    return content


def _state_from_lightning(content: Dict[str, Any], path: Any) -> Dict[str, Any]:
    """``state_dict.pth`` from Lightning's keys alone: models and optimizers, no RNG state."""
    models: Dict[int, Dict[str, Any]] = {}
    for key, value in content["state_dict"].items():
        if key.startswith(ckpt.MODEL_PREFIX):
            idx, _, name = key[len(ckpt.MODEL_PREFIX) :].partition(".")
            models.setdefault(int(idx), {})[name] = value
    if not models:
        raise errors.InvalidCheckpointException(
            f"{path} was not written for a det_lightning trial: its state_dict has no "
            f"'{ckpt.MODEL_PREFIX}*' keys."
        )
    return {
        ckpt.MODELS: [models[i] for i in sorted(models)],
        ckpt.OPTIMIZERS: list(content.get("optimizer_states", [])),
        ckpt.LR_SCHEDULERS: [],
        ckpt.CALLBACKS: {},
    }


def _trial_state(content: Dict[str, Any]) -> Dict[str, int]:
    state = dict(content.get(ckpt.LIGHTNING_TRIAL_STATE_KEY) or ckpt.new_trial_state())
    if ckpt.LIGHTNING_TRIAL_STATE_KEY not in content:
        state.update(
            batches_trained=int(content.get("global_step", 0)),
            epochs_trained=int(content.get("epoch", 0)),
        )
    state["last_ckpt"] = state["batches_trained"]  # this is a checkpoint of that batch
    return state


def _unknown_load_data(content: Dict[str, Any]) -> Dict[str, Any]:
    hparams = content.get("hyper_parameters")
    return {
        "trial_type": "PyTorchTrial",
        "experiment_config": None,
        "hparams": dict(hparams) if isinstance(hparams, dict) else {},
        "trial_cls_spec": "",
        "is_trainer": True,
    }


def _steps_only_state(source: pathlib.Path) -> Dict[str, int]:
    state = ckpt.new_trial_state()
    metadata = ckpt.read_metadata(source)
    state["batches_trained"] = state["last_ckpt"] = int(metadata.get("steps_completed", 0))
    return state


def _lightning_content(
    state: Dict[str, Any], trial_state: Dict[str, int], load_data: Dict[str, Any]
) -> Dict[str, Any]:
    models = state.get(ckpt.MODELS) or [state.get("model_state_dict", {})]
    return {
        "epoch": int(trial_state.get("epochs_trained", 0)),
        "global_step": int(trial_state["batches_trained"]),
        "pytorch-lightning_version": _lightning_version(),
        "state_dict": {
            f"{ckpt.MODEL_PREFIX}{i}.{key}": value
            for i, model in enumerate(models)
            for key, value in model.items()
        },
        "optimizer_states": list(state.get(ckpt.OPTIMIZERS, [])),
        "lr_schedulers": [],
        ckpt.LIGHTNING_STATE_KEY: state,
        ckpt.LIGHTNING_TRIAL_STATE_KEY: dict(trial_state),
        ckpt.LIGHTNING_LOAD_DATA_KEY: load_data,
    }


def _lightning_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("lightning")
    except metadata.PackageNotFoundError:
        return "unknown"


def _save_new_file(content: Dict[str, Any], out: pathlib.Path) -> None:
    """``torch.save`` to a temporary file renamed into place; never replaces ``out``."""
    if out.exists():
        raise FileExistsError(f"{out} exists; not overwriting it. Choose another file name.")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}{ckpt.PARTIAL_SUFFIX}")
    try:
        torch.save(content, str(tmp))
        try:
            os.link(tmp, out)  # fails, rather than replacing, if ``out`` appeared meanwhile
        except FileExistsError:
            raise
        except OSError:  # a filesystem without hard links
            os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


# ----- command line ---------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det-lightning checkpoint",
        description="Convert between Lightning .ckpt files and Determined checkpoint directories.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="a .ckpt file to a Determined checkpoint")
    export.add_argument("ckpt_file", help="the Lightning .ckpt file")
    export.add_argument("--checkpoint-dir", help="where the new <uuid> directory goes")
    export.add_argument("--code", help="source directory to copy into code/")
    export.add_argument("--trust", action="store_true", help="allow full unpickling")
    convert = commands.add_parser("convert", help="a Determined checkpoint to a .ckpt file")
    convert.add_argument("checkpoint_path", help="the Determined checkpoint directory")
    convert.add_argument("ckpt_file", help="the .ckpt file to write")
    convert.add_argument("--trust", action="store_true", help="allow full unpickling")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """``det-lightning checkpoint export|convert ...``; returns the exit status.

    Args:
        argv: the arguments after ``checkpoint`` (default: ``sys.argv[1:]``).
    """
    args = _parser().parse_args(argv)
    given = args.ckpt_file if args.command == "export" else args.checkpoint_path
    if not os.path.exists(given):  # a usage error (status 2), as a missing script for `run`
        print(f"det-lightning checkpoint {args.command}: {given}: no such file.", file=sys.stderr)
        return 2
    try:
        out = _run(args)
    except (errors.InvalidCheckpointException, FileExistsError) as e:
        print(f"det-lightning checkpoint {args.command}: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


def _run(args: argparse.Namespace) -> pathlib.Path:
    if args.command == "export":
        return export_lightning_checkpoint(
            args.ckpt_file, args.checkpoint_dir, code_dir=args.code, trust=args.trust
        )
    return to_lightning_checkpoint(args.checkpoint_path, args.ckpt_file, trust=args.trust)
