"""``load_trial_from_checkpoint_path``: a trained trial back from a checkpoint directory.

Unlike Determined, importing the trial class from the checkpoint's ``code/`` (which runs that
code) needs consent: pass ``trial_class=``, or ``trust_code=True``, or set
``DET_LIGHTNING_TRUST_CHECKPOINT_CODE=1``. ``state_dict.pth`` is read with
``torch.load(weights_only=True)`` unless ``torch_load_kwargs`` says otherwise.
"""

import importlib
import json
import logging
import os
import pathlib
import warnings
from typing import Any, Dict, Optional, Type

from det_lightning import errors
from det_lightning._import import import_from_path
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._context import PyTorchTrialContext
from det_lightning.pytorch._remote import checkpoint_location
from det_lightning.pytorch._state_dicts import load_models
from det_lightning.pytorch._trial import PyTorchTrial

logger = logging.getLogger("det_lightning.pytorch")

TRUST_CODE_ENV = "DET_LIGHTNING_TRUST_CHECKPOINT_CODE"


class CheckpointLoadContext(PyTorchTrialContext):
    """The context a trial is rebuilt with when loading a checkpoint (no training).

    Example::

        with det_lightning.import_from_path(path + "/code/"):
            import my_model_def
        trial = my_model_def.MyTrial(pytorch.CheckpointLoadContext(), ...)

    Args:
        hparams: the trial's hyperparameters.
        exp_conf: the experiment configuration.
    """

    def __init__(
        self, hparams: Optional[Dict] = None, exp_conf: Optional[Dict[str, Any]] = None
    ) -> None:
        super().__init__(hparams=hparams, exp_conf=exp_conf, trial_seed=0)


def read_load_data(ckpt_dir: pathlib.Path) -> Dict[str, Any]:
    """``load_data.json`` (or the ``metadata.json`` of checkpoints from Determined <= 0.17.7).

    Raises:
        InvalidCheckpointException: the directory is missing or describes no trial.
    """
    if not ckpt_dir.is_dir():
        raise errors.InvalidCheckpointException(
            f"Checkpoint directory {ckpt_dir} does not exist (or is not a directory)."
        )
    load_data_path = ckpt_dir / ckpt.LOAD_DATA_FILE
    metadata_path = ckpt_dir / ckpt.METADATA_FILE
    if load_data_path.exists():
        load_data = _read_json(load_data_path)
        if load_data.get("trial_type") != "PyTorchTrial":
            logger.warning(
                "Checkpoint does not appear to be a valid PyTorchTrial checkpoint, continuing "
                "anyway..."
            )
        return load_data
    if metadata_path.exists():
        metadata = _read_json(metadata_path)
        config = metadata.get("experiment_config") or {}
        return {
            "experiment_config": config,
            "hparams": metadata.get("hparams"),
            "trial_cls_spec": config.get("entrypoint", ""),
            "is_trainer": False,
        }
    raise errors.InvalidCheckpointException(
        f"Checkpoint {ckpt_dir} has neither load_data.json nor metadata.json, so the trial class "
        "and hyperparameters are unknown. Checkpoints written by Determined 0.17.7 and earlier "
        "need a metadata.json (Checkpoint.write_metadata_file('metadata.json'))."
    )


def _read_json(path: pathlib.Path) -> Dict[str, Any]:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise errors.InvalidCheckpointException(f"Cannot read {path}: {e}") from e
    if not isinstance(content, dict):
        raise errors.InvalidCheckpointException(f"{path} holds no JSON object.")
    return content


def _import_trial_class(ckpt_dir: pathlib.Path, spec: str, in_main: bool) -> Type[PyTorchTrial]:
    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname or "<locals>" in qualname:
        where = (
            "the entrypoint script, which is not an importable module"
            if in_main
            else ("a function" if "<locals>" in qualname else "no importable module")
        )
        raise ValueError(
            f"Unable to import trial class {spec!r} from checkpoint {ckpt_dir}: it was defined in "
            f"{where}. Pass trial_class=YourTrial, or define the class at the top level of an "
            "importable module."
        )
    if in_main:
        logger.warning(
            f"Importing trial class {qualname}, which was defined in the entrypoint script. "
            f"Assuming that entrypoint is importable via `import {module_name}`."
        )
    try:
        with import_from_path(ckpt_dir / ckpt.CODE_DIR):
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
    except Exception as e:
        raise ValueError(
            f"Automatic import logic failed to import Trial class as {spec} from "
            f"{ckpt_dir / ckpt.CODE_DIR} ({type(e).__name__}: {e}). You will need to provide "
            "your Trial class via the trial_class argument instead."
        ) from e
    return obj  # type: ignore[no-any-return]


def _trusts_code(trust_code: bool) -> bool:
    return trust_code or os.environ.get(TRUST_CODE_ENV, "").lower() in ("1", "true", "yes")


def load_trial_from_checkpoint_path(
    path: str,
    trial_class: Optional[Type[PyTorchTrial]] = None,
    trial_kwargs: Optional[Dict[str, Any]] = None,
    torch_load_kwargs: Optional[Dict[str, Any]] = None,
    *,
    trust_code: bool = False,
    **kwargs: Any,
) -> PyTorchTrial:
    """Rebuilds the trial and loads its models' weights from a checkpoint directory.

    Args:
        path: the checkpoint directory, or its URL (``s3://bucket/prefix/<uuid>``; downloaded
            into the cache, see ``_remote``).
        trial_class: the trial class. When omitted it is imported from the checkpoint's
            ``code/``, which runs that code: pass ``trust_code=True`` (or set
            ``DET_LIGHTNING_TRUST_CHECKPOINT_CODE=1``) to allow it.
        trial_kwargs: extra keyword arguments for the trial's constructor.
        torch_load_kwargs: for ``torch.load``; ``weights_only=True`` and ``map_location="cpu"``
            unless you override them.
        trust_code: allow importing the trial class from the checkpoint's ``code/``.
        **kwargs: deprecated spelling of ``torch_load_kwargs``.

    Raises:
        InvalidCheckpointException: the directory is missing, damaged, or of another trial.
        ValueError: the trial class is not given and may not, or cannot, be imported.
    """
    if kwargs:
        if torch_load_kwargs:
            raise ValueError("kwargs may not be set if torch_load_kwargs is also set")
        warnings.warn(
            "Passing **kwargs to load_trial_from_checkpoint_path() is deprecated; pass a dict "
            "as torch_load_kwargs instead.",
            FutureWarning,
            stacklevel=2,
        )
        torch_load_kwargs = kwargs
    ckpt_dir = checkpoint_location(path).local_copy()  # a URL's: downloaded
    load_data = read_load_data(ckpt_dir)
    state = ckpt.read_state_dict(ckpt_dir, **(torch_load_kwargs or {}))
    if trial_class is None:
        spec = load_data.get("trial_cls_spec", "")
        if not _trusts_code(trust_code):
            raise ValueError(
                f"load_trial_from_checkpoint_path({str(path)!r}) would import the trial class "
                f"{spec!r} from the checkpoint's code/, which runs that code. Pass "
                f"trial_class=YourTrial, or trust_code=True (or set {TRUST_CODE_ENV}=1) if you "
                "trust the checkpoint."
            )
        trial_class = _import_trial_class(ckpt_dir, spec, bool(load_data.get("trial_in_main")))
    context = CheckpointLoadContext(load_data.get("hparams"), load_data.get("experiment_config"))
    trial = trial_class(context, **(trial_kwargs or {}))  # type: ignore[call-arg]
    load_models(context.models, state)
    return trial
