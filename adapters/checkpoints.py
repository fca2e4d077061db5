"""Writing Determined checkpoints during ``fit()``, and the checkpoint policy (best, all, none).

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

Under a URL root (``_remote``: S3, GCS, Azure) the directory is written into the local cache
the same way, the hooks above get that local directory, and then its files are uploaded with the
marker ``<uuid>/.complete`` last, before ``on_checkpoint_upload_end``, as Determined uploads
after ``on_checkpoint_write_end``.

As with Determined's local (shared_fs) storage, ``on_checkpoint_write_end`` gets the
checkpoint's final directory, which stays there, so a callback can keep the path to copy or
upload it later. The directory is complete before the hooks run: a directory named ``<uuid>``
is never incomplete, and files a callback adds there are additions to a finished checkpoint.

What a checkpoint holds of the trial is listed once, in ``stateful.py``; which checkpoints stay
on disk is ``retention.py``'s decision, and where a run starts ``resume.py``'s.
"""

import logging
import pathlib
from typing import Any, Dict, List, Optional

import lightning.pytorch as pl

from det_lightning.adapters import stateful
from det_lightning.adapters.checkpoint_io import DeterminedSave
from det_lightning.adapters.metrics import is_numerical_scalar
from det_lightning.adapters.resume import ResumePlan
from det_lightning.adapters.retention import (
    RUN_KEY,
    VALIDATION_KEY,
    Entry,
    Retention,
    choose_kept,
    run_entries,
    steps_from_metadata,
)
from det_lightning.adapters.storage import raise_if_storage_error
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint_write import make_load_data, write_files
from det_lightning.pytorch._remote import CheckpointRoot, RemoteRoot, delete_checkpoint, local_dir
from det_lightning.pytorch._code import code_sources

logger = logging.getLogger("det_lightning.core")


class CheckpointManager:
    """Saves checkpoints of one ``fit()`` and applies the checkpoint policy.

    Args:
        root: the checkpoint directory, or a URL (written locally first, then uploaded).
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
        root: CheckpointRoot,
        module: Any,
        policy: str,
        metric: str,
        smaller_is_better: bool,
        sampler: Any,
        base_seed: Optional[int],
        skip_dirs: List[pathlib.Path],
    ) -> None:
        self.root = root
        self.local_root = local_dir(root)  # where checkpoints are written on this machine
        self.module = module
        self.policy = policy
        self.metric = metric
        self.smaller_is_better = smaller_is_better
        self.sampler = sampler
        self.base_seed = base_seed
        self.skip_dirs = skip_dirs
        self.metric_configured = False  # set when exp_conf names the searcher metric
        self.retention = Retention.from_exp_conf(module.context.engine.exp_conf)
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

    def continue_run(self, plan: ResumePlan) -> None:
        """After a resume of this trial (not a warm start), takes over the run id of the
        checkpoint and the earlier runs' checkpoints under ``root`` up to it, with their
        searcher metric: ``best`` and retention then span every run of the trial."""
        resumed_from = plan.path
        if resumed_from is None or plan.warm_start:
            return
        run_id = ckpt.read_metadata(resumed_from).get(RUN_KEY)
        if not isinstance(run_id, str):
            return
        self.run_id = run_id
        steps = steps_from_metadata(resumed_from)
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
        self.last_metrics_batch = self.module.progress.batches_trained
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
        module.progress.last_ckpt = module.progress.batches_trained
        dist = module.context.distributed
        uuid = dist.broadcast(ckpt.new_uuid())
        request = DeterminedSave(self.local_root, uuid, self._write_files)
        try:
            trainer.save_checkpoint(
                str(self.local_root / uuid), weights_only=False, storage_options=request
            )
        except Exception as e:
            raise_if_storage_error(e, self.local_root / uuid)  # with the path and the cause
            raise
        where: Any = request.path
        if request.path is not None:  # the chief, which wrote it
            for callback in module.det_callbacks.values():
                callback.on_checkpoint_end(str(request.path))
                callback.on_checkpoint_write_end(str(request.path))
            if isinstance(self.root, RemoteRoot):  # with what the callbacks added; marker last
                where = self.root.upload(uuid, request.path)
        for callback in module.det_callbacks.values():
            callback.on_checkpoint_upload_end(uuid=uuid)
        if dist.rank == 0:
            logger.info(f"saved checkpoint {uuid} at {where}")
            self._record(uuid)
        return uuid

    def _validation_now(self) -> Optional[float]:
        """The searcher metric of a validation at the current batch, if there was one."""
        metrics = self.last_metrics
        if metrics is None or self.last_metrics_batch != self.module.progress.batches_trained:
            return None
        if self.policy == "best":
            return self.searcher_value(metrics)  # 'best' needs it: a clear error if missing
        value: Any = metrics.get(self.metric)
        return float(value) if is_numerical_scalar(value) else None

    def _record(self, uuid: str) -> None:
        self.written.append(uuid)
        value = self._validation_now()
        self.entries.append(Entry(uuid, self.module.progress.batches_trained, value))
        if value is not None and self.is_better(value):
            self.best_value, self.best_uuid = value, uuid
        if self.deletes:
            self._delete_unkept()

    def _delete_unkept(self) -> None:
        """Applies checkpoint_storage's retention to this trial's checkpoints under ``root``
        (earlier runs' after a resume, and ours); never touches any other checkpoint."""
        keep = choose_kept(self.entries, self.retention, self.smaller_is_better)
        for entry in [e for e in self.entries if e.uuid not in keep]:
            if not delete_checkpoint(self.root, entry.uuid):
                continue  # logged; weighed again after the next checkpoint
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
            module.progress.trial_state(),
            self._load_data(),
            code_sources(type(module.trial)),
            [self.local_root, *self.skip_dirs],
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
        state = stateful.save(stateful.trial_slots(module.context, module.det_callbacks))
        data_state: Dict[str, Any] = {"base_seed": self.base_seed}
        if self.sampler is not None:
            data_state["pass_states"] = self.sampler.state(module.progress.batches_trained)
            data_state["pass_starts"] = self.sampler.starts(module.progress.batches_trained)
        state[ckpt.EXTRA] = {"format": 1, "data": data_state}
        return state

    def _load_data(self) -> Dict[str, Any]:
        context = self.module.context
        return make_load_data(type(self.module.trial), context.engine.hparams, context.engine.exp_conf)
