"""Writing Determined checkpoints during ``fit()`` (whether a validation calls for one is
``det_lightning/pytorch/_checkpoint_policy.py``'s decision; the hooks go through ``_dispatch``).

One save, as Determined orders its callbacks::

    wait for the previous checkpoint's write (and run what follows it, below)
    trainer.save_checkpoint(root/uuid, storage_options=DeterminedSave)   # on every rank
      TrialModule.on_save_checkpoint            # Determined state into Lightning's dict
      Lightning callbacks' on_save_checkpoint   # they see every Determined checkpoint
      DeterminedCheckpointIO (rank 0): .<uuid>.partial/ made
        on_checkpoint_save_start(state_dict)    # may still edit the state dict
        the state copied (snapshot)             # training goes on from here
        [background thread] state_dict.pth, trial_state.pkl, load_data.json, metadata.json,
                            code/; fsync; root.stage: rename to root/uuid (a directory:
                            published); root.publish (a URL: upload, marker last)
    ... training goes on; between batches, once the write has ended (or when something needs it:
    the next save, a validation's report, fit()'s end, a preemption):
    on_checkpoint_end(root/uuid); on_checkpoint_write_end(root/uuid)   # rank 0
    on_checkpoint_upload_end(uuid)              # every rank (the others at once)
    retention: delete this trial's checkpoints checkpoint_storage no longer keeps (rank 0);
               what it failed to delete is tried again by the next pass, at fit()'s end,
               and by the next run in the root (it stays marked: ``CheckpointStore.sweep``)

The write runs in the training thread instead, and the hooks follow it at once, as in
Determined, with ``Trainer(sync_checkpoints=True)`` or ``DET_LIGHTNING_SYNC_CHECKPOINTS=1``, and
when a callback overrides one of those three hooks (Determined calls them before the next batch,
and a callback may add files to the directory before the upload). A failed background write
fails the run with its error at the next of those points (at ``fit()``'s end at the latest); its
partial directory is removed, so nothing of it is ever visible.

Under a URL root (``_remote.ObjectStore``: S3, GCS, Azure) the directory is written into the
local cache (``root.staging()``) the same way, and then ``root.publish`` uploads its files with
the marker ``<uuid>/.complete`` last (by the background thread, or after
``on_checkpoint_write_end`` in the training thread), before ``on_checkpoint_upload_end``, as
Determined uploads after ``on_checkpoint_write_end``.

As with Determined's local (shared_fs) storage, ``on_checkpoint_write_end`` gets the
checkpoint's final directory, which stays there, so a callback can keep the path to copy or
upload it later. The directory is complete before the hooks run: a directory named ``<uuid>``
is never incomplete, and files a callback adds there are additions to a finished checkpoint.

What a checkpoint holds of the trial is listed once, in ``stateful.py``; which checkpoints stay
on disk is ``retention.py``'s decision, and where a run starts ``resume.py``'s.
"""

import logging
import pathlib
from typing import Any, Dict, List, Mapping, Optional

import lightning.pytorch as pl

from det_lightning.adapters import stateful
from det_lightning.adapters.checkpoint_io import DeterminedSave
from det_lightning.adapters.module import TrialModule
from det_lightning.adapters.resume import ResumePlan, identity_of
from det_lightning.adapters.storage import raise_if_storage_error
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._background import BackgroundWriter, snapshot
from det_lightning.pytorch._callback import PyTorchCallback
from det_lightning.pytorch._checkpoint_policy import CheckpointPolicy, after_validation
from det_lightning.pytorch._checkpoint_write import CheckpointFiles, make_load_data
from det_lightning.pytorch._code import code_sources
from det_lightning.pytorch._config_sections import CheckpointStorageConfig
from det_lightning.pytorch._data_position import DataPosition
from det_lightning.pytorch._identity import IDENTITY_KEY
from det_lightning.pytorch._local_store import abandon_partial, begin_atomically
from det_lightning.pytorch._retention import (
    RUN_KEY,
    VALIDATION_KEY,
    Entry,
    choose_kept,
    run_entries,
    steps_from_metadata,
)
from det_lightning.pytorch._store import CheckpointStore
from det_lightning.util import is_numerical_scalar

logger = logging.getLogger("det_lightning.pytorch")

# Determined calls these right after a checkpoint's write (and upload), before the next batch.
_WRITE_HOOKS = ("on_checkpoint_end", "on_checkpoint_write_end", "on_checkpoint_upload_end")


def _observes_writes(callbacks: Mapping[str, PyTorchCallback]) -> bool:
    """Whether a callback overrides a hook Determined calls right after each write: then every
    write happens in the training thread, so those hooks come where Determined calls them
    (before the next batch; they may add files before the upload)."""
    observing = sorted(
        f"{name}.{hook}"
        for name, callback in callbacks.items()
        for hook in _WRITE_HOOKS
        if getattr(type(callback), hook) is not getattr(PyTorchCallback, hook)
    )
    if observing:
        logger.info(
            f"Checkpoints are written in the training thread: {', '.join(observing)} runs right "
            "after each write, as in Determined."
        )
    return bool(observing)


class CheckpointManager:
    """Saves checkpoints of one ``fit()`` when the periods or the checkpoint policy ask for one
    (``_checkpoint_policy.after_validation`` decides), runs Determined's hooks around each write
    (through ``TrialModule.det_hooks``), and applies retention.

    Args:
        root: where checkpoints go: a directory, or a URL (written locally first, then
            uploaded; ``_store``).
        module: the ``TrialModule`` being trained.
        policy: when a validation is followed by a checkpoint, and the searcher metric;
            replaced only by the policy a decision returns ('best' falling back to 'all').
        sampler: the training batch sampler, whose shuffle state resume needs (or None).
        base_seed: the derived-shuffle seed used with several processes (or None).
        skip_dirs: directories never copied into ``code/``.
        retention: ``checkpoint_storage``'s counts (which checkpoints stay).
        background: write checkpoints in a background thread (see ``_background``).
    """

    def __init__(
        self,
        root: CheckpointStore,
        module: TrialModule,
        *,
        policy: CheckpointPolicy,
        sampler: Any,
        base_seed: Optional[int],
        skip_dirs: List[pathlib.Path],
        retention: CheckpointStorageConfig,
        background: bool = True,
    ) -> None:
        self.root = root
        self.local_root = root.staging()  # where checkpoints are written on this machine
        self.module = module
        self.policy = policy  # replaced only by the one a decision returns (after_validation)
        self.sampler = sampler
        self.base_seed = base_seed
        self.skip_dirs = skip_dirs
        self.retention = retention
        self.best_value: Optional[float] = None
        self.best_uuid: Optional[str] = None
        self.written: List[str] = []  # this run's checkpoints, oldest first
        # Checkpoints of this trial retention weighs: earlier runs' (after a resume) and ours.
        self.run_id = ckpt.new_uuid()
        self.entries: List[Entry] = []
        self.last_metrics: Optional[Dict[str, Any]] = None
        self.last_metrics_batch = -1
        # Only the chief writes; None: every write in the training thread.
        chief = module.context.distributed.rank == 0
        # The chief alone decides (and says so, once, not once per rank).
        background = background and chief and not _observes_writes(module.det_callbacks)
        self.writer = BackgroundWriter() if background else None
        self.pending: Optional[str] = None  # the UUID being written in the background
        self.published: Optional[CheckpointStore] = None  # where the background thread put it
        # Every Lightning checkpoint of the module (ours, a user's ModelCheckpoint) carries the
        # Determined state, so a .ckpt file can be exported to a Determined checkpoint.
        module.set_checkpoint_extras(self.lightning_extras)

    # ----- policy ---------------------------------------------------------------------------
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
        self.entries = [
            e for e in run_entries(self.root, run_id, self.policy.metric) if e.steps <= steps
        ]
        for entry in self.entries:
            if entry.value is not None and self.policy.is_better(entry.value, self.best_value):
                self.best_value, self.best_uuid = entry.value, entry.uuid

    def wants_checkpoint_after_validation(self, metrics: Dict[str, Any]) -> bool:
        """Records a validation's metrics; True when the policy checkpoints after it."""
        self.last_metrics = metrics
        self.last_metrics_batch = self.module.progress.batches_trained
        decision = after_validation(self.policy, metrics, self.best_value)
        if decision.warning is not None:
            logger.warning(decision.warning)
        self.policy = decision.policy  # 'all' from now on when 'best' fell back
        return decision.checkpoint

    @property
    def deletes(self) -> bool:
        """Deleting is for 'best', or for any policy once checkpoint_storage sets the counts."""
        return self.policy.policy == "best" or self.retention.retention_configured

    # ----- saving ---------------------------------------------------------------------------
    def save(self, trainer: pl.Trainer) -> str:
        """Writes a checkpoint through ``trainer.save_checkpoint``; returns its UUID. In the
        background (the default) the write goes on after this returns: ``wait_for_write``."""
        self.wait_for_write()  # one write at a time; the previous one's hooks and retention
        module = self.module
        module.progress.last_ckpt = module.progress.batches_trained
        dist = module.context.distributed
        uuid = dist.broadcast(ckpt.new_uuid())
        request = DeterminedSave(lambda checkpoint: self._write(uuid, checkpoint))
        try:
            trainer.save_checkpoint(
                str(self.local_root / uuid), weights_only=False, storage_options=request
            )
        except Exception as e:
            raise_if_storage_error(e, self.local_root / uuid)  # with the path and the cause
            raise
        if request.path is None:  # another rank writes it
            self._after_write(uuid, None, published=None)
            return uuid
        self._note(uuid)
        if self.writer is None:
            self._after_write(uuid, request.path, published=None)
        else:
            self.pending = uuid
        return uuid

    def _write(self, uuid: str, lightning_checkpoint: Dict[str, Any]) -> pathlib.Path:
        """On the chief, inside ``trainer.save_checkpoint``: takes the files' content now and
        writes them (here, or in the background thread)."""
        partial = begin_atomically(self.local_root, uuid)
        try:
            files = self._files(lightning_checkpoint)  # the callbacks see the partial directory
        except BaseException:
            abandon_partial(partial)
            raise
        if self.writer is None:
            return self.root.stage(uuid, partial, files.write)
        self.published = None
        self.writer.submit(lambda: self._write_in_background(uuid, partial, files))
        return self.local_root / uuid

    def _write_in_background(
        self, uuid: str, partial: pathlib.Path, files: CheckpointFiles
    ) -> None:
        local = self.root.stage(uuid, partial, files.write)  # a directory: published now
        self.published = self.root.publish(uuid, local)  # a bucket: uploaded, marker last

    def wait_for_write(self) -> None:
        """Waits for the checkpoint being written in the background, if any, then runs what
        follows a complete write (hooks, upload, log line, retention) in this thread.

        Raises:
            the write's own error (a ``CheckpointStorageError`` when the storage caused it).
        """
        uuid, self.pending = self.pending, None
        if uuid is None:
            return
        assert self.writer is not None
        try:
            self.writer.wait()
        except Exception as e:
            raise_if_storage_error(e, self.local_root / uuid)
            raise
        self._after_write(uuid, self.local_root / uuid, published=self.published)

    def poll(self) -> None:
        """Completes the background write if it has ended (between batches; never waits)."""
        if self.writer is not None and self.writer.finished():
            self.wait_for_write()

    def finish(self) -> None:
        """At ``fit()``'s end: the last write completes on the chief, and every rank learns
        whether it failed (none goes on, or exits, before the checkpoint is there)."""
        error: Optional[BaseException] = None
        try:
            self.wait_for_write()
        except Exception as e:
            error = e
        dist = self.module.context.distributed
        failed = dist.broadcast(None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        if failed is not None:
            raise RuntimeError(f"The chief's last checkpoint write failed: {failed}")
        if self.deletes and dist.rank == 0:
            self._delete_unkept()  # again what a pass failed to delete (else nothing)

    def abandon(self) -> None:
        """After an exception in training: joins the write in flight (a complete checkpoint
        stays; a failed one leaves nothing), logging its error instead of masking the first."""
        uuid, self.pending = self.pending, None
        if uuid is None or self.writer is None:
            return
        try:
            self.writer.wait()
        except Exception as e:
            logger.error(f"Writing checkpoint {uuid} failed too: {type(e).__name__}: {e}")

    def _after_write(
        self, uuid: str, path: Optional[pathlib.Path], published: Optional[CheckpointStore]
    ) -> None:
        """Determined's hooks after a write (``path``: on the chief), the publish unless done
        (a bucket's upload), the log line and retention; on every rank, in the training
        thread."""
        module = self.module
        where: Optional[CheckpointStore] = None
        if path is not None:
            module.det_hooks.on_checkpoint_write_end(str(path))  # and on_checkpoint_end
            # With what the callbacks added; in a bucket, marker last.
            where = published if published is not None else self.root.publish(uuid, path)
        module.det_hooks.on_checkpoint_upload_end(uuid)
        if path is not None:
            logger.info(f"saved checkpoint {uuid} at {where}")
            if self.deletes:  # only now: a superseded checkpoint goes once this one is there
                self._delete_unkept()

    def _validation_now(self) -> Optional[float]:
        """The searcher metric of a validation at the current batch, if there was one."""
        metrics = self.last_metrics
        if metrics is None or self.last_metrics_batch != self.module.progress.batches_trained:
            return None
        return self.policy.value_if_reported(metrics)  # 'best' needs it: a clear error if missing

    def _note(self, uuid: str) -> None:
        """Books the checkpoint (for ``best``, retention and the fit's result) when it is
        taken; retention deletes only after its write is complete."""
        self.written.append(uuid)
        value = self._validation_now()
        self.entries.append(Entry(uuid, self.module.progress.batches_trained, value))
        if value is not None and self.policy.is_better(value, self.best_value):
            self.best_value, self.best_uuid = value, uuid

    def _delete_unkept(self) -> None:
        """Applies checkpoint_storage's retention to this trial's checkpoints under ``root``
        (earlier runs' after a resume, and ours); never touches any other checkpoint."""
        keep = choose_kept(self.entries, self.retention, self.policy.smaller_is_better)
        for entry in [e for e in self.entries if e.uuid not in keep]:
            if not self.root.delete(entry.uuid):
                continue  # logged and marked; tried again by the next pass, at fit()'s end
                # and by the next run in this root (CheckpointStore.sweep)
            self.entries.remove(entry)
            if entry.uuid in self.written:
                self.written.remove(entry.uuid)
            logger.info(
                f"deleted checkpoint {entry.uuid} (not kept by {self.retention.describe_retention()})"
            )

    def _files(self, lightning_checkpoint: Dict[str, Any]) -> CheckpointFiles:
        """The checkpoint's content as of now, after ``on_checkpoint_save_start`` (which may
        edit the state dict); copied (``snapshot``) when it is written in the background."""
        module = self.module
        state_dict = lightning_checkpoint.get(ckpt.LIGHTNING_STATE_KEY) or self.state_dict()
        module.det_hooks.on_checkpoint_save_start(state_dict)
        callbacks = lightning_checkpoint.get("callbacks")
        if self.writer is not None:
            state_dict, callbacks = snapshot((state_dict, callbacks))
        return CheckpointFiles(
            state_dict,
            module.progress.trial_state(),
            self._load_data(),
            code_sources(type(module.trial)),
            [self.local_root, *self.skip_dirs],
            callbacks,
            {
                RUN_KEY: self.run_id,
                VALIDATION_KEY: self._validation_record(),
                IDENTITY_KEY: identity_of(module.trial, module.context).to_metadata(),
            },
        )

    def _validation_record(self) -> Optional[Dict[str, Any]]:
        """The validation at this batch, for retention and the client's ``list_checkpoints``:
        the searcher metric, its value, and every numerical metric reported with it."""
        value = self._validation_now()
        if value is None:
            return None
        numbers = {
            k: float(v) for k, v in (self.last_metrics or {}).items() if is_numerical_scalar(v)
        }
        return {"metric": self.policy.metric, "value": value, "metrics": numbers}

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
        sampler, batches = self.sampler, module.progress.batches_trained
        state[ckpt.EXTRA] = DataPosition(
            base_seed=self.base_seed,
            pass_states=None if sampler is None else sampler.state(batches),
            pass_starts=None if sampler is None else sampler.starts(batches),
        ).saved()
        return state

    def _load_data(self) -> Dict[str, Any]:
        context = self.module.context
        return make_load_data(
            type(self.module.trial), context.engine.hparams, context.engine.exp_conf
        )
