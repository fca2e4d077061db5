"""``load_trial_from_checkpoint_path``: a trained trial back from a checkpoint directory."""

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
from det_lightning.pytorch._trial import PyTorchTrial

logger = logging.getLogger("det_lightning.pytorch")

TRUST_CODE_ENV = "DET_LIGHTNING_TRUST_CHECKPOINT_CODE"


class CheckpointLoadContext(PyTorchTrialContext):
    """The context a trial is rebuilt with when loading a checkpoint (no training)."""

    def __init__(
        self, hparams: Optional[Dict] = None, exp_conf: Optional[Dict[str, Any]] = None
    ) -> None:
        super().__init__(hparams=hparams, exp_conf=exp_conf, trial_seed=0)


def _read_load_data(ckpt_dir: pathlib.Path) -> Dict[str, Any]:
    load_data_path = ckpt_dir / ckpt.LOAD_DATA_FILE
    metadata_path = ckpt_dir / ckpt.METADATA_FILE
    if load_data_path.exists():
        load_data = json.loads(load_data_path.read_text())
        if load_data.get("trial_type") != "PyTorchTrial":
            logger.warning(
                "Checkpoint does not appear to be a valid PyTorchTrial checkpoint, continuing "
                "anyway..."
            )
        return load_data
    if metadata_path.exists():
        metadata = json.loads(metadata_path.read_text())
        config = metadata.get("experiment_config") or {}
        return {
            "experiment_config": config,
            "hparams": metadata.get("hparams"),
            "trial_cls_spec": config.get("entrypoint", ""),
            "is_trainer": False,
        }
    if not ckpt_dir.exists():
        raise errors.InvalidCheckpointException(f"Checkpoint directory {ckpt_dir} does not exist.")
    raise errors.InvalidCheckpointException(
        f"Checkpoint {ckpt_dir} has neither load_data.json nor metadata.json, so the trial class "
        "and hyperparameters are unknown. Checkpoints written by Determined 0.17.7 and earlier "
        "need a metadata.json (Checkpoint.write_metadata_file('metadata.json'))."
    )


def _import_trial_class(ckpt_dir: pathlib.Path, spec: str, in_main: bool) -> Type[PyTorchTrial]:
    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname:
        raise ValueError(
            f"Unable to load trial class from spec {spec!r} (the trial was defined in a script "
            "that is not an importable module). Pass trial_class=YourTrial."
        )
    if in_main:
        logger.warning(
            f"Importing trial class {qualname}, which was defined in the entrypoint script. "
            f"Assuming that entrypoint is importable via `import {module_name}`."
        )
    import importlib

    try:
        with import_from_path(ckpt_dir / ckpt.CODE_DIR):
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
    except Exception as e:
        raise ValueError(
            f"Automatic import logic failed to import Trial class as {spec}. You will need to "
            "provide your Trial class via the trial_class argument instead."
        ) from e
    return obj  # type: ignore[no-any-return]


def load_trial_from_checkpoint_path(
    path: str,
    trial_class: Optional[Type[PyTorchTrial]] = None,
    trial_kwargs: Optional[Dict[str, Any]] = None,
    torch_load_kwargs: Optional[Dict[str, Any]] = None,
    trust_code: bool = False,
    **kwargs: Any,
) -> PyTorchTrial:
    """Rebuilds the trial and loads its models' weights from a checkpoint directory.

    Args:
        path: the checkpoint directory.
        trial_class: the trial class. When omitted it is imported from the checkpoint's
            ``code/``, which runs that code: pass ``trust_code=True`` (or set
            ``DET_LIGHTNING_TRUST_CHECKPOINT_CODE=1``) to allow it.
        trial_kwargs: extra keyword arguments for the trial's constructor.
        torch_load_kwargs: for ``torch.load``; ``weights_only=True`` unless you override it.
        trust_code: allow importing the trial class from the checkpoint's ``code/``.
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
    ckpt_dir = pathlib.Path(path)
    load_data = _read_load_data(ckpt_dir)
    state = ckpt.read_state_dict(ckpt_dir, **(torch_load_kwargs or {}))
    if trial_class is None:
        if not (trust_code or os.environ.get(TRUST_CODE_ENV) == "1"):
            raise ValueError(
                f"load_trial_from_checkpoint_path({str(path)!r}) would import the trial class "
                f"{load_data.get('trial_cls_spec')!r} from the checkpoint's code/, which runs that "
                "code. Pass trial_class=YourTrial, or trust_code=True if you trust the checkpoint."
            )
        trial_class = _import_trial_class(
            ckpt_dir, load_data.get("trial_cls_spec", ""), bool(load_data.get("trial_in_main"))
        )
    context = CheckpointLoadContext(load_data.get("hparams"), load_data.get("experiment_config"))
    trial = trial_class(context, **(trial_kwargs or {}))  # type: ignore[call-arg]
    ckpt.load_models(context.models, state)
    return trial
