"""Writing, retaining and restoring Determined checkpoints during ``fit()``."""

import json
import logging
import pathlib
import shutil
from typing import Any, Dict, List, Optional, Tuple

import lightning.pytorch as pl
import torch

import det_lightning
from det_lightning import errors
from det_lightning.adapters.checkpoint_io import DeterminedSave, write_determined_files
from det_lightning.adapters.metrics import is_numerical_scalar
from det_lightning.pytorch import _checkpoint as ckpt

logger = logging.getLogger("det_lightning.core")

LIGHTNING_STATE_FILE = "lightning_state.pth"


class CheckpointManager:
    """Saves checkpoints of one ``fit()`` and applies the checkpoint policy.

    Args:
        root: the checkpoint directory.
        module: the ``TrialModule`` being trained.
        policy: ``"best"``, ``"all"`` or ``"none"``.
        metric, smaller_is_better: what ``"best"`` compares.
        sampler: the training batch sampler, whose shuffle state resume needs (or None).
        base_seed: the derived-shuffle seed used with several processes (or None).
        skip_dirs: directories never copied into ``code/``.
    """

    def __init__(
        self,
        root: pathlib.Path,
        module: Any,
        policy: str,
        metric: str,
        smaller_is_better: bool,
        sampler: Any,
        base_seed: Optional[int],
        skip_dirs: List[pathlib.Path],
    ) -> None:
        self.root = root
        self.module = module
        self.policy = policy
        self.metric = metric
        self.smaller_is_better = smaller_is_better
        self.sampler = sampler
        self.base_seed = base_seed
        self.skip_dirs = skip_dirs
        self.best_value: Optional[float] = None
        self.best_uuid: Optional[str] = None
        self.written: List[str] = []  # this run's checkpoints, oldest first
        self.last_metrics: Optional[Dict[str, Any]] = None

    # ----- policy ---------------------------------------------------------------------------
    def searcher_value(self, metrics: Dict[str, Any]) -> float:
        if self.metric not in metrics:
            raise RuntimeError(
                f"Search method is configured to use metric '{self.metric}' but model definition "
                f"returned validation metrics {sorted(metrics)}. The metric used by "
                "checkpoint_policy='best' must be one of the validation metrics: set "
                "exp_conf['searcher']['metric'] to one of them."
            )
        value = metrics[self.metric]
        if not is_numerical_scalar(value):
            raise RuntimeError(
                f"Searcher validation metric '{self.metric}' returned a non-scalar value: {value}."
            )
        return float(value)

    def is_better(self, value: float) -> bool:
        if self.best_value is None:
            return True
        return value < self.best_value if self.smaller_is_better else value > self.best_value

    def wants_checkpoint_after_validation(self, metrics: Dict[str, Any]) -> bool:
        self.last_metrics = metrics
        if self.policy == "all":
            return True
        if self.policy == "best":
            return self.is_better(self.searcher_value(metrics))
        return False

    # ----- saving ---------------------------------------------------------------------------
    def save(self, trainer: pl.Trainer) -> str:
        module = self.module
        state = module.state
        state.values["last_ckpt"] = state.batches_trained
        dist = module.context.distributed
        uuid = dist.broadcast(ckpt.new_uuid())
        request = DeterminedSave(self.root, uuid, self._write_files)
        trainer.save_checkpoint(str(self.root / uuid), weights_only=False, storage_options=request)
        for callback in module.det_callbacks.values():
            callback.on_checkpoint_upload_end(uuid=uuid)
        if dist.rank == 0:
            logger.info(f"saved checkpoint {uuid} at {self.root / uuid}")
            self._record(uuid)
        return uuid

    def _record(self, uuid: str) -> None:
        self.written.append(uuid)
        metrics = self.last_metrics
        if metrics is not None and self.policy == "best" and self.metric in metrics:
            value = self.searcher_value(metrics)
            if self.is_better(value) or self.best_uuid is None:
                self.best_value, self.best_uuid = value, uuid
        if self.policy == "best":
            self._delete_superseded()

    def _delete_superseded(self) -> None:
        """Keeps this run's best and latest checkpoints (Determined's save_trial_best=1,
        save_trial_latest=1); never touches checkpoints this run did not write."""
        keep = {self.best_uuid, self.written[-1]}
        for uuid in [u for u in self.written if u not in keep]:
            shutil.rmtree(self.root / uuid, ignore_errors=True)
            self.written.remove(uuid)
            logger.info(f"deleted checkpoint {uuid}")

    def _write_files(self, directory: pathlib.Path, lightning_checkpoint: Dict[str, Any]) -> None:
        module = self.module
        state_dict = self.state_dict()
        for callback in module.det_callbacks.values():
            callback.on_checkpoint_save_start(state_dict)
        write_determined_files(
            directory,
            state_dict,
            module.state.values,
            self._load_data(),
            self._metadata(),
            ckpt.source_dir(type(module.trial)),
            [self.root, *self.skip_dirs],
        )
        lightning_callbacks = lightning_checkpoint.get("callbacks")
        if lightning_callbacks:
            # Lightning callbacks' state (EarlyStopping's counters, ...) for resuming; kept out of
            # state_dict.pth so that file never needs more than weights_only loading.
            torch.save({"callbacks": lightning_callbacks}, str(directory / LIGHTNING_STATE_FILE))
        for callback in module.det_callbacks.values():
            callback.on_checkpoint_end(str(directory))
            callback.on_checkpoint_write_end(str(directory))

    def state_dict(self) -> Dict[str, Any]:
        module = self.module
        context = module.context
        state: Dict[str, Any] = {
            ckpt.MODELS: [model.state_dict() for model in context.models],
            ckpt.OPTIMIZERS: [opt.state_dict() for opt in context.optimizers],
            ckpt.LR_SCHEDULERS: [s.state_dict() for s in context.lr_schedulers],
            ckpt.CALLBACKS: {name: cb.state_dict() for name, cb in module.det_callbacks.items()},
            ckpt.RNG_STATE: ckpt.capture_rng_state(_cuda_index(context.device)),
        }
        if context._scaler is not None:
            state[ckpt.SCALER] = context._scaler.state_dict()
        data_state: Dict[str, Any] = {"base_seed": self.base_seed}
        if self.sampler is not None:
            data_state["pass_states"] = self.sampler.state(module.state.batches_trained)
        state[ckpt.EXTRA] = {"format": 1, "data": data_state}
        return state

    def _load_data(self) -> Dict[str, Any]:
        context = self.module.context
        spec, in_main = ckpt.trial_class_spec(type(self.module.trial))
        load_data: Dict[str, Any] = {
            "trial_type": "PyTorchTrial",
            "experiment_config": context._exp_conf,
            "hparams": context._hparams,
            "trial_cls_spec": spec,
            "is_trainer": True,
        }
        if in_main:
            load_data["trial_in_main"] = True
        return load_data

    def _metadata(self) -> Dict[str, Any]:
        return {
            "determined_version": ckpt.DETERMINED_VERSION,
            "det_lightning_version": det_lightning.__version__,
            "steps_completed": self.module.state.batches_trained,
            "framework": f"torch-{torch.__version__}",
            "format": "pickle",
        }


def _cuda_index(device: torch.device) -> Optional[int]:
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


# ----- restoring ------------------------------------------------------------------------------
def resolve_checkpoint(latest_checkpoint: str, root: pathlib.Path) -> pathlib.Path:
    """A checkpoint path, a UUID under ``root``, or ``"latest"`` (the newest complete one)."""
    if latest_checkpoint == "latest":
        ckpt.remove_partials(root)
        found = ckpt.latest_checkpoint(root)
        if found is None:
            raise errors.InvalidCheckpointException(
                f"fit(latest_checkpoint='latest'): no complete checkpoint under {root}. Start "
                "without latest_checkpoint, or point checkpoint_dir at the right directory."
            )
        return found
    path = pathlib.Path(latest_checkpoint).expanduser()
    if path.is_dir():
        return path
    under_root = root / latest_checkpoint
    if under_root.is_dir():
        return under_root
    raise errors.InvalidCheckpointException(
        f"fit(latest_checkpoint={latest_checkpoint!r}): no such checkpoint directory, and no "
        f"checkpoint of that UUID under {root}. Pass a checkpoint directory, a UUID under the "
        "checkpoint directory, or 'latest'."
    )


def read_for_resume(path: pathlib.Path, trust: bool) -> Tuple[Dict[str, Any], Dict[str, int]]:
    """The state dict and trial state of a checkpoint to resume from."""
    try:
        state = ckpt.read_state_dict(path)
    except errors.InvalidCheckpointException as e:
        if not (trust and _written_by_determined(path) and "weights_only" in str(e)):
            raise
        logger.warning(
            f"{path} was written by Determined itself and pickles numpy objects; loading it with "
            "full unpickling (torch.load(weights_only=False)) because you chose it to resume "
            "from. Only do this with checkpoints you trust."
        )
        state = ckpt.read_state_dict(path, weights_only=False)
    trial_state = ckpt.read_trial_state(path)
    if trial_state is None:
        trial_state = ckpt.new_trial_state()
        steps = _steps_from_metadata(path)
        trial_state.update(batches_trained=steps, last_ckpt=steps)
    return state, trial_state


def _written_by_determined(path: pathlib.Path) -> bool:
    try:
        metadata = json.loads((path / ckpt.METADATA_FILE).read_text())
    except (OSError, ValueError):
        return True
    return "det_lightning_version" not in metadata


def _steps_from_metadata(path: pathlib.Path) -> int:
    try:
        return int(json.loads((path / ckpt.METADATA_FILE).read_text())["steps_completed"])
    except (OSError, ValueError, KeyError):
        return 0


def apply_state(module: Any, state: Dict[str, Any]) -> None:
    """Restores models, optimizers, schedulers, scaler, callbacks and RNG from ``state``."""
    context = module.context
    for callback in module.det_callbacks.values():
        callback.on_checkpoint_load_start(state)
    ckpt.load_models(context.models, state)
    ckpt.load_list(context.optimizers, _legacy(state, ckpt.OPTIMIZERS, "optimizer_state_dict"),
                   "optimizer")
    ckpt.load_list(context.lr_schedulers, _legacy(state, ckpt.LR_SCHEDULERS, "lr_scheduler"),
                   "LR scheduler")
    if ckpt.SCALER in state and context._scaler is not None:
        context._scaler.load_state_dict(state[ckpt.SCALER])
    elif context._scaler is not None:
        logger.warning("The experiment uses a GradScaler but the checkpoint has no scaler state.")
    saved_callbacks = state.get(ckpt.CALLBACKS, {})
    for name, callback in module.det_callbacks.items():
        if name in saved_callbacks:
            callback.load_state_dict(saved_callbacks[name])
    if ckpt.RNG_STATE in state:
        ckpt.restore_rng_state(state[ckpt.RNG_STATE], _cuda_index(context.device))
    else:
        logger.warning("The checkpoint has no random state to restore.")


def _legacy(state: Dict[str, Any], key: str, old_key: str) -> List[Any]:
    if old_key in state:
        return [state[old_key]]
    return list(state.get(key, []))


def restore_lightning_callbacks(trainer: pl.Trainer, path: pathlib.Path) -> None:
    """Gives Lightning callbacks back the state a checkpoint saved for them."""
    state_file = path / LIGHTNING_STATE_FILE
    if not state_file.exists():
        return
    try:
        saved = torch.load(str(state_file), map_location="cpu", weights_only=True)["callbacks"]
    except Exception as e:  # a callback state that needs unpickling: start it fresh
        logger.warning(f"Lightning callback state in {state_file} not restored: {e}")
        return
    for callback in trainer.callbacks:
        if callback.state_key in saved:
            callback.load_state_dict(saved[callback.state_key])
