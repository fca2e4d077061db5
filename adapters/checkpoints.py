"""Writing, retaining and restoring Determined checkpoints during ``fit()``.

One save, as Determined orders its callbacks::

    trainer.save_checkpoint(root/uuid, storage_options=DeterminedSave)   # on every rank
      TrialModule.on_save_checkpoint            # Determined state into Lightning's dict
      Lightning callbacks' on_save_checkpoint   # they see every Determined checkpoint
      DeterminedCheckpointIO (rank 0): in .<uuid>.partial/
        on_checkpoint_save_start(state_dict)    # may still edit the state dict
        state_dict.pth, trial_state.pkl, load_data.json, metadata.json, code/
        rename to root/uuid                     # complete before anyone sees the name
    on_checkpoint_end(root/uuid); on_checkpoint_write_end(root/uuid)   # rank 0
    on_checkpoint_upload_end(uuid)              # every rank
    retention: delete this trial's checkpoints checkpoint_storage no longer keeps (rank 0)

As with Determined's local (shared_fs) storage, ``on_checkpoint_write_end`` gets the
checkpoint's final directory, which stays there, so a callback can keep the path to copy or
upload it later. The directory is complete before the hooks run: a directory named ``<uuid>``
is never incomplete, and files a callback adds there are additions to a finished checkpoint.

Retention follows Determined's garbage collection (``checkpoint_storage.save_trial_best``,
``save_trial_latest``, ``save_experiment_best``), applied as each checkpoint completes instead of
at the end of the experiment; the result is the same, since a checkpoint outside a trial's best
and latest never re-enters them. ``metadata.json`` records each checkpoint's searcher metric and
the trial's run id, so after a resume the trial's earlier checkpoints count too.
"""

import logging
import os
import pathlib
import shutil
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

import lightning.pytorch as pl
import torch

from det_lightning import errors
from det_lightning.adapters.checkpoint_io import DeterminedSave
from det_lightning.adapters.preemption import LATEST_CHECKPOINT_ENV
from det_lightning.adapters.storage import raise_if_storage_error
from det_lightning.adapters.metrics import is_numerical_scalar
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint_write import make_load_data, remove_partials, write_files
from det_lightning.pytorch._state_dicts import (
    capture_rng_state,
    load_list,
    load_models,
    model_state_dicts,
    restore_rng_state,
)
from det_lightning.pytorch._code import code_sources

logger = logging.getLogger("det_lightning.core")


class CheckpointManager:
    """Saves checkpoints of one ``fit()`` and applies the checkpoint policy.

    Args:
        root: the checkpoint directory.
        module: the ``TrialModule`` being trained.
        policy: ``"best"``, ``"all"`` or ``"none"``.
        metric: the searcher metric ``"best"`` compares.
        smaller_is_better: whether a smaller ``metric`` is better.
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
        self.metric_configured = False  # set when exp_conf names the searcher metric
        self.retention = Retention.from_exp_conf(module.context._exp_conf)
        # Deleting is for 'best', or for any policy once checkpoint_storage sets the counts.
        self.deletes = policy == "best" or self.retention.configured
        self.best_value: Optional[float] = None
        self.best_uuid: Optional[str] = None
        self.written: List[str] = []  # this run's checkpoints, oldest first
        # Checkpoints of this trial retention weighs: earlier runs' (after a resume) and ours.
        self.run_id = ckpt.new_uuid()
        self.entries: List[Entry] = []
        self.last_metrics: Optional[Dict[str, Any]] = None
        self.last_metrics_batch = -1
        # Every Lightning checkpoint of the module (ours, a user's ModelCheckpoint) carries the
        # Determined state, so a .ckpt file can be exported to a Determined checkpoint.
        module.checkpoint_extras = self.lightning_extras

    # ----- policy ---------------------------------------------------------------------------
    def searcher_value(self, metrics: Dict[str, Any]) -> float:
        """``metrics[metric]`` as a float.

        Raises:
            RuntimeError: the validation did not report the metric, or not as a scalar.
        """
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

    def continue_run(self, resumed_from: Optional[pathlib.Path]) -> None:
        """After a resume of this trial (not a warm start), takes over the run id of the
        checkpoint and the earlier runs' checkpoints under ``root`` up to it, with their
        searcher metric: ``best`` and retention then span every run of the trial."""
        if resumed_from is None:
            return
        run_id = ckpt.read_metadata(resumed_from).get(RUN_KEY)
        trial_state = ckpt.read_trial_state(resumed_from)
        if not isinstance(run_id, str) or (trial_state and not ckpt.is_same_trial(trial_state)):
            return
        self.run_id = run_id
        steps = _steps_from_metadata(resumed_from)
        self.entries = [e for e in run_entries(self.root, run_id, self.metric) if e.steps <= steps]
        for entry in self.entries:
            if entry.value is not None and self.is_better(entry.value):
                self.best_value, self.best_uuid = entry.value, entry.uuid

    def is_better(self, value: float) -> bool:
        """Whether ``value`` beats the best so far of this trial."""
        if self.best_value is None:
            return True
        return value < self.best_value if self.smaller_is_better else value > self.best_value

    def wants_checkpoint_after_validation(self, metrics: Dict[str, Any]) -> bool:
        """Records a validation's metrics; True when the policy checkpoints after it."""
        self.last_metrics = metrics
        self.last_metrics_batch = self.module.state.batches_trained
        if self.policy == "all":
            return True
        if self.policy == "best":
            if self.metric not in metrics and not self.metric_configured:
                self._fall_back_to_all(metrics)
                return True
            return self.is_better(self.searcher_value(metrics))
        return False

    def _fall_back_to_all(self, metrics: Dict[str, Any]) -> None:
        """No searcher metric was configured and the default one is not reported: keep
        Determined's local behaviour (checkpoint after every validation) instead of failing a
        script that never asked for 'best'."""
        logger.warning(
            f"checkpoint_policy='best' compares '{self.metric}', which the trial does not report "
            f"(it reports {sorted(metrics)}); falling back to 'all' as Determined's local mode "
            "does. Set exp_conf={'searcher': {'metric': ..., 'smaller_is_better': ...}} to keep "
            "only the best checkpoints."
        )
        self.policy = "all"
        self.deletes = self.retention.configured

    # ----- saving ---------------------------------------------------------------------------
    def save(self, trainer: pl.Trainer) -> str:
        """Writes a checkpoint through ``trainer.save_checkpoint``; returns its UUID."""
        module = self.module
        module.state.values["last_ckpt"] = module.state.batches_trained
        dist = module.context.distributed
        uuid = dist.broadcast(ckpt.new_uuid())
        request = DeterminedSave(self.root, uuid, self._write_files)
        try:
            trainer.save_checkpoint(
                str(self.root / uuid), weights_only=False, storage_options=request
            )
        except Exception as e:
            raise_if_storage_error(e, self.root / uuid)  # with the path and the cause
            raise
        if request.path is not None:  # the chief, which wrote it
            for callback in module.det_callbacks.values():
                callback.on_checkpoint_end(str(request.path))
                callback.on_checkpoint_write_end(str(request.path))
        for callback in module.det_callbacks.values():
            callback.on_checkpoint_upload_end(uuid=uuid)
        if dist.rank == 0:
            logger.info(f"saved checkpoint {uuid} at {request.path}")
            self._record(uuid)
        return uuid

    def _validation_now(self) -> Optional[float]:
        """The searcher metric of a validation at the current batch, if there was one."""
        metrics = self.last_metrics
        if metrics is None or self.last_metrics_batch != self.module.state.batches_trained:
            return None
        if self.policy == "best":
            return self.searcher_value(metrics)  # 'best' needs it: a clear error if missing
        value: Any = metrics.get(self.metric)
        return float(value) if is_numerical_scalar(value) else None

    def _record(self, uuid: str) -> None:
        self.written.append(uuid)
        value = self._validation_now()
        self.entries.append(Entry(uuid, self.module.state.batches_trained, value))
        if value is not None and self.is_better(value):
            self.best_value, self.best_uuid = value, uuid
        if self.deletes:
            self._delete_unkept()

    def _delete_unkept(self) -> None:
        """Applies checkpoint_storage's retention to this trial's checkpoints under ``root``
        (earlier runs' after a resume, and ours); never touches any other checkpoint."""
        keep = choose_kept(self.entries, self.retention, self.smaller_is_better)
        for entry in [e for e in self.entries if e.uuid not in keep]:
            shutil.rmtree(self.root / entry.uuid, ignore_errors=True)
            self.entries.remove(entry)
            if entry.uuid in self.written:
                self.written.remove(entry.uuid)
            logger.info(f"deleted checkpoint {entry.uuid} (not kept by {self.retention.describe()})")

    def _write_files(self, directory: pathlib.Path, lightning_checkpoint: Dict[str, Any]) -> None:
        module = self.module
        state_dict = lightning_checkpoint.get(ckpt.LIGHTNING_STATE_KEY) or self.state_dict()
        for callback in module.det_callbacks.values():
            callback.on_checkpoint_save_start(state_dict)
        write_files(
            directory,
            state_dict,
            module.state.values,
            self._load_data(),
            code_sources(type(module.trial)),
            [self.root, *self.skip_dirs],
            lightning_checkpoint.get("callbacks"),
            {RUN_KEY: self.run_id, VALIDATION_KEY: self._validation_record()},
        )

    def _validation_record(self) -> Optional[Dict[str, Any]]:
        value = self._validation_now()
        return None if value is None else {"metric": self.metric, "value": value}

    def lightning_extras(self) -> Dict[str, Any]:
        """What ``TrialModule.on_save_checkpoint`` adds to a Lightning checkpoint."""
        return {
            ckpt.LIGHTNING_STATE_KEY: self.state_dict(),
            ckpt.LIGHTNING_LOAD_DATA_KEY: self._load_data(),
        }

    def state_dict(self) -> Dict[str, Any]:
        """The content of ``state_dict.pth``, as of now."""
        module = self.module
        context = module.context
        state: Dict[str, Any] = {
            ckpt.MODELS: model_state_dicts(context.models),
            ckpt.OPTIMIZERS: [opt.state_dict() for opt in context.optimizers],
            ckpt.LR_SCHEDULERS: [s.state_dict() for s in context.lr_schedulers],
            ckpt.CALLBACKS: {name: cb.state_dict() for name, cb in module.det_callbacks.items()},
            ckpt.RNG_STATE: capture_rng_state(_cuda_index(context.device)),
        }
        if context._scaler is not None:
            state[ckpt.SCALER] = context._scaler.state_dict()
        data_state: Dict[str, Any] = {"base_seed": self.base_seed}
        if self.sampler is not None:
            data_state["pass_states"] = self.sampler.state(module.state.batches_trained)
            data_state["pass_starts"] = self.sampler.starts(module.state.batches_trained)
        state[ckpt.EXTRA] = {"format": 1, "data": data_state}
        return state

    def _load_data(self) -> Dict[str, Any]:
        context = self.module.context
        return make_load_data(type(self.module.trial), context._hparams, context._exp_conf)


# ----- retention ------------------------------------------------------------------------------
RUN_KEY = "det_lightning_run"  # metadata.json: one id for every run (resume) of a trial
VALIDATION_KEY = "det_lightning_validation"  # metadata.json: {"metric", "value"} or null


class Entry(NamedTuple):
    """One checkpoint retention weighs: its UUID, batches trained, searcher metric (or None)."""

    uuid: str
    steps: int
    value: Optional[float]


class Retention(NamedTuple):
    """``checkpoint_storage``'s ``save_trial_best``, ``save_trial_latest`` and
    ``save_experiment_best`` (Determined's defaults 1, 1 and 0), and whether it sets any."""

    trial_best: int = 1
    trial_latest: int = 1
    experiment_best: int = 0
    configured: bool = False

    @classmethod
    def from_exp_conf(cls, exp_conf: Optional[Dict[str, Any]]) -> "Retention":
        """Reads ``exp_conf["checkpoint_storage"]``.

        >>> Retention.from_exp_conf({"checkpoint_storage": {"save_trial_best": 3}})
        Retention(trial_best=3, trial_latest=1, experiment_best=0, configured=True)

        Raises:
            InvalidExperimentException: a count that is not an integer >= 0.
        """
        storage = (exp_conf or {}).get("checkpoint_storage") or {}
        counts: Dict[str, int] = {}
        for key, field in (("save_trial_best", "trial_best"), ("save_trial_latest",
                           "trial_latest"), ("save_experiment_best", "experiment_best")):
            value = storage.get(key, cls._field_defaults[field])
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise errors.InvalidExperimentException(
                    f"checkpoint_storage.{key} is {value!r}; it must be an integer >= 0 (the "
                    "number of checkpoints to keep)."
                )
            counts[field] = value
        configured = any(k in storage for k in (
            "save_trial_best", "save_trial_latest", "save_experiment_best"))
        return cls(configured=configured, **counts)

    def describe(self) -> str:
        return (f"save_trial_best={self.trial_best}, save_trial_latest={self.trial_latest}, "
                f"save_experiment_best={self.experiment_best}")


def choose_kept(
    entries: List[Entry], retention: Retention, smaller_is_better: bool
) -> Set[str]:
    """The UUIDs one trial keeps: its ``trial_latest`` newest checkpoints, its
    ``max(trial_best, experiment_best)`` best validated ones (a trial's share of the
    experiment's best is among its own best; ``retain_experiment_best`` trims the rest after the
    experiment), and always the newest, which a resume needs.

    ``entries`` are oldest first; on equal metrics the older checkpoint ranks first.

    >>> e = [Entry("a", 2, 1.0), Entry("b", 4, 3.0), Entry("c", 6, 0.5), Entry("d", 8, None)]
    >>> sorted(choose_kept(e, Retention(1, 1), True)), sorted(choose_kept(e, Retention(2, 0), False))
    (['c', 'd'], ['a', 'b', 'd'])
    >>> sorted(choose_kept(e[:2], Retention(0, 3), True))
    ['a', 'b']
    """
    keep = {e.uuid for e in entries[max(0, len(entries) - retention.trial_latest):]}
    if entries:
        keep.add(entries[-1].uuid)
    validated = [e for e in entries if e.value is not None]
    validated.sort(key=lambda e: e.value if smaller_is_better else -e.value)  # type: ignore
    keep.update(e.uuid for e in validated[:max(retention.trial_best, retention.experiment_best)])
    return keep


def run_entries(root: pathlib.Path, run_id: str, metric: str) -> List[Entry]:
    """The complete checkpoints under ``root`` of the trial run ``run_id``, oldest first, with
    their recorded ``metric`` (None when recorded for another metric or not at all)."""
    found = []
    if not root.is_dir():
        return []
    for path in root.iterdir():
        if path.name.startswith(".") or not ckpt.is_complete(path):
            continue
        metadata = ckpt.read_metadata(path)
        if metadata.get(RUN_KEY) != run_id:
            continue
        validation = metadata.get(VALIDATION_KEY) or {}
        value = validation.get("value") if validation.get("metric") == metric else None
        entry = Entry(path.name, _steps_from_metadata(path),
                      None if value is None else float(value))
        found.append((entry.steps, path.stat().st_mtime, entry))
    return [entry for _, _, entry in sorted(found, key=lambda t: t[:2])]


def retain_experiment_best(
    trial_dirs: List[pathlib.Path], exp_conf: Dict[str, Any]
) -> List[pathlib.Path]:
    """Determined's garbage collection at the end of an experiment: in each trial's checkpoint
    directory (its newest run), keeps the ``save_trial_latest`` newest and ``save_trial_best``
    best checkpoints, plus the ``save_experiment_best`` best across all trials; deletes the rest.
    Metric and direction come from ``exp_conf["searcher"]``. Returns the deleted directories.
    """
    retention = Retention.from_exp_conf(exp_conf)
    searcher = exp_conf.get("searcher") or {}
    metric = searcher.get("metric", "validation_loss")
    smaller = bool(searcher.get("smaller_is_better", True))
    per_trial: Dict[pathlib.Path, List[Entry]] = {}
    for directory in trial_dirs:
        newest = ckpt.latest_checkpoint(directory)
        run_id = ckpt.read_metadata(newest).get(RUN_KEY) if newest is not None else None
        if isinstance(run_id, str):
            per_trial[directory] = run_entries(directory, run_id, metric)
    ranked = [(d, e) for d, entries in per_trial.items() for e in entries if e.value is not None]
    ranked.sort(key=lambda de: de[1].value if smaller else -de[1].value)  # type: ignore
    experiment_best = {(d, e.uuid) for d, e in ranked[:retention.experiment_best]}
    own = retention._replace(experiment_best=0)
    deleted = []
    for directory, entries in per_trial.items():
        keep = choose_kept(entries, own, smaller)
        for entry in entries:
            if entry.uuid not in keep and (directory, entry.uuid) not in experiment_best:
                shutil.rmtree(directory / entry.uuid, ignore_errors=True)
                deleted.append(directory / entry.uuid)
    return deleted


def _cuda_index(device: torch.device) -> Optional[int]:
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


# ----- restoring ------------------------------------------------------------------------------
class ResumePlan(NamedTuple):
    """Where ``fit()`` starts.

    Attributes:
        path: the checkpoint to restore, or None for a fresh start.
        trusted: whether the user named that checkpoint (a path or UUID), which alone allows
            full unpickling of a checkpoint the real Determined wrote; one found by scanning
            the directory (``"latest"``) never gets it.
        name: what ``on_trial_startup`` gets as ``latest_checkpoint``.
    """

    path: Optional[pathlib.Path]
    trusted: bool
    name: Optional[str]


def plan_resume(requested: Optional[str], root: pathlib.Path) -> ResumePlan:
    """Resolves ``fit(latest_checkpoint=...)``, or ``$DET_LIGHTNING_LATEST_CHECKPOINT`` when
    it is None. ``"latest"`` with no complete checkpoint under ``root`` is a fresh start, so
    one command serves the first run and every requeue.

    Raises:
        InvalidCheckpointException: a named checkpoint does not exist.
    """
    source = "fit(latest_checkpoint='latest')"
    if requested is None:
        requested = os.environ.get(LATEST_CHECKPOINT_ENV, "").strip() or None
        source = f"{LATEST_CHECKPOINT_ENV}=latest"
        if requested not in (None, "latest"):
            logger.info(f"Resuming from {LATEST_CHECKPOINT_ENV}={requested}.")
    if requested is None:
        return ResumePlan(None, False, None)
    if requested != "latest":
        return ResumePlan(resolve_checkpoint(requested, root), True, requested)
    for partial in remove_partials(root):
        logger.info(f"Deleted the unfinished checkpoint {partial}.")
    found = ckpt.latest_checkpoint(root)
    if found is None:
        logger.info(
            f"{source}: no complete checkpoint under {root} yet; starting from the beginning."
        )
        return ResumePlan(None, False, None)
    logger.info(f"{source}: resuming from {found}.")
    return ResumePlan(found, False, str(found))


def resolve_checkpoint(latest_checkpoint: str, root: pathlib.Path) -> pathlib.Path:
    """A checkpoint path, or a UUID under ``root``.

    Raises:
        InvalidCheckpointException: nothing of that name exists.
    """
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
    """The state dict and trial state of a checkpoint to resume from.

    Args:
        path: the checkpoint directory.
        trust: allow full unpickling for a checkpoint the real Determined wrote (its
            ``state_dict.pth`` pickles numpy RNG state).
    """
    try:
        state = ckpt.read_state_dict(path)
    except errors.InvalidCheckpointException as e:
        refused = e.__cause__ is not None and ckpt.refused_by_weights_only(e.__cause__)
        if not (trust and refused and _written_by_determined(path)):
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
    elif not ckpt.is_same_trial(trial_state):
        # Determined's rule: another trial's checkpoint (a cluster trial's) is a warm start.
        logger.info(
            f"{path} belongs to trial {trial_state.get('trial_id')}, not to this (local) trial: "
            "restoring its weights, optimizer and callback state, and training from batch 0 "
            f"(it had trained {trial_state['batches_trained']} batches)."
        )
        trial_state = ckpt.new_trial_state()
        state = {k: v for k, v in state.items() if k != ckpt.EXTRA}  # its data position
    return state, trial_state


def _written_by_determined(path: pathlib.Path) -> bool:
    return "det_lightning_version" not in ckpt.read_metadata(path)


def _steps_from_metadata(path: pathlib.Path) -> int:
    try:
        return int(ckpt.read_metadata(path).get("steps_completed", 0))
    except (TypeError, ValueError):
        return 0


def apply_state(module: Any, state: Dict[str, Any]) -> None:
    """Restores models, optimizers, schedulers, scaler, callbacks and RNG from ``state``."""
    context = module.context
    for callback in module.det_callbacks.values():
        callback.on_checkpoint_load_start(state)
    load_models(context.models, state)
    load_list(context.optimizers, _legacy(state, ckpt.OPTIMIZERS, "optimizer_state_dict"),
                   "optimizer")
    load_list(context.lr_schedulers, _legacy(state, ckpt.LR_SCHEDULERS, "lr_scheduler"),
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
        restore_rng_state(state[ckpt.RNG_STATE], _cuda_index(context.device))
    else:
        logger.warning("The checkpoint has no random state to restore.")


def _legacy(state: Dict[str, Any], key: str, old_key: str) -> List[Any]:
    if old_key in state:
        return [state[old_key]]
    return list(state.get(key, []))


def restore_lightning_callbacks(trainer: pl.Trainer, path: pathlib.Path) -> None:
    """Gives Lightning callbacks back the state a checkpoint saved for them."""
    state_file = path / ckpt.LIGHTNING_CALLBACKS_FILE
    if not state_file.exists():
        return
    try:
        saved = torch.load(str(state_file), map_location="cpu", weights_only=True)["callbacks"]
    except Exception as e:  # a callback state that needs unpickling: start it fresh
        logger.warning(f"Lightning callback state in {state_file} not restored: {e}")
        return
    for callback in trainer.callbacks:  # type: ignore[attr-defined]  # set by a connector
        if callback.state_key in saved:
            callback.load_state_dict(saved[callback.state_key])
