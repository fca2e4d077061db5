"""Where ``fit()`` starts, decided once before training: ``plan_resume`` finds and reads the
checkpoint into a frozen ``ResumePlan``, which ``run_fit`` follows::

    plan_resume(latest_checkpoint, root, identity)     # identity: the run's (``_identity``)
      None                        $DET_LIGHTNING_LATEST_CHECKPOINT, if set; else a fresh start
      "latest"                    delete .<uuid>.partial leftovers; of the checkpoints of this
                                  run (its identity) under root, the one with the most batches
                                  (a trial of an experiment with none: under <root>/../../
                                  trial-<n>, the layout before experiment ids); others are
                                  named in one log line; a fresh start if there is none;
                                  damaged ones (files deleted) are named in a warning, never
                                  resumed from
      a path, or a UUID under root    that checkpoint (an error if there is no such directory);
                                  ours, of another trial class or hyperparameters: refused
                                  unless $DET_LIGHTNING_ALLOW_WARM_START=1 (a warm start)
      state_dict.pth              weights_only; full unpickling only for a checkpoint the user
                                  named and the real Determined wrote (it pickles numpy state)
      trial_state.pkl             plain data only; another trial's (a cluster trial's) makes a
                                  warm start: its weights, optimizers and callbacks, from batch 0
    run_fit    on_trial_startup(plan.first_batch, plan.name)
    _train     apply_state(module, plan.state)          once the loaders exist
               CheckpointManager.continue_run(plan)     retention spans the trial's earlier runs
               restore_lightning_callbacks(trainer, plan.path)
"""

import dataclasses
import logging
import os
import pathlib
from typing import Any, Dict, List, Optional, Tuple

import lightning.pytorch as pl
import torch

from det_lightning import errors
from det_lightning._env import ALLOW_WARM_START_ENV, LATEST_CHECKPOINT_ENV
from det_lightning.adapters import stateful
from det_lightning.adapters.module import TrialModule
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._checkpoint_write import trial_class_spec
from det_lightning.pytorch._data_position import DataPosition
from det_lightning.pytorch._identity import RunIdentity, saved_identity
from det_lightning.pytorch._local_store import remove_partials
from det_lightning.pytorch._remote import checkpoint_location, is_url
from det_lightning.pytorch._retention import steps_from_metadata
from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("det_lightning.pytorch")


@dataclasses.dataclass(frozen=True)
class ResumePlan:
    """Where ``fit()`` starts; the default is a fresh start.

    Attributes:
        path: the checkpoint to restore, or None for a fresh start.
        trusted: whether the user named that checkpoint (a path or UUID), which alone allows
            full unpickling of a checkpoint the real Determined wrote; one found by scanning
            the directory (``"latest"``) never gets it.
        name: what ``on_trial_startup`` gets as ``latest_checkpoint``.
        warm_start: the checkpoint is another trial's (Determined's rule): its weights,
            optimizer and callback state are restored, training starts at batch 0.
        state: the content of its ``state_dict.pth`` (without its data position on a warm
            start), or None.
        trial_state: Determined's ``_TrialState`` to train on from (``batches_trained``, ...).
    """

    path: Optional[pathlib.Path] = None
    trusted: bool = False
    name: Optional[str] = None
    warm_start: bool = False
    state: Optional[Dict[str, Any]] = None
    trial_state: Dict[str, int] = dataclasses.field(default_factory=ckpt.new_trial_state)

    @property
    def first_batch(self) -> int:
        """The batch training starts at (``first_batch_idx`` of ``on_trial_startup``)."""
        return self.trial_state["batches_trained"]

    @property
    def data_position(self) -> DataPosition:
        """The saved data position (sampler states, shuffle seed); empty when there is none."""
        return DataPosition.from_state(self.state)


def identity_of(trial: Any, context: Any) -> RunIdentity:
    """The identity of the run training ``trial`` (what its checkpoints record)."""
    return RunIdentity.of_run(trial_class_spec(type(trial))[0], context.engine.hparams)


def plan_resume(
    latest_checkpoint: Optional[str], root: CheckpointStore, identity: RunIdentity
) -> ResumePlan:
    """Resolves ``fit(latest_checkpoint=...)``, or ``$DET_LIGHTNING_LATEST_CHECKPOINT`` when
    it is None, and reads the checkpoint. ``"latest"`` with no complete checkpoint under
    ``root`` is a fresh start, so one command serves the first run and every requeue.

    Raises:
        InvalidCheckpointException: a named checkpoint does not exist, or the checkpoint is
            damaged or needs unpickling it may not get (the message says what to do).
    """
    path, trusted, name = _locate(latest_checkpoint, root, identity)
    if path is None:
        return ResumePlan()
    state = _read_state_dict(path, trusted)
    trial_state = ckpt.read_trial_state(path)
    warm = trusted and _refuse_unless_warm_start(path, identity, trial_state)
    if trial_state is None:
        steps = steps_from_metadata(path)
        trial_state = {**ckpt.new_trial_state(), "batches_trained": steps, "last_ckpt": steps}
    if warm:
        logger.info(
            f"{ALLOW_WARM_START_ENV}=1: warm start from {path}, another run's checkpoint: restoring "
            "its weights, optimizer and callback state, and training from batch 0."
        )
    elif not ckpt.is_same_trial(trial_state):
        logger.info(
            f"{path} belongs to trial {trial_state.get('trial_id')}, not to this (local) trial: "
            "restoring its weights, optimizer and callback state, and training from batch 0 "
            f"(it had trained {trial_state['batches_trained']} batches)."
        )
    if warm or not ckpt.is_same_trial(trial_state):
        without_data_position = {k: v for k, v in state.items() if k != ckpt.EXTRA}
        return ResumePlan(path, trusted, name, warm_start=True, state=without_data_position)
    return ResumePlan(path, trusted, name, state=state, trial_state=trial_state)


def _refuse_unless_warm_start(
    path: pathlib.Path, identity: RunIdentity, trial_state: Optional[Dict[str, Any]]
) -> bool:
    """Whether a checkpoint named explicitly is another run's that ``$DET_LIGHTNING_ALLOW_WARM_START``
    makes a warm start. Only det_lightning's checkpoints of this (local) trial id are checked:
    one of another trial id is a warm start by Determined's own rule.

    Raises:
        InvalidCheckpointException: its trial class or hyperparameters differ from the run's.
    """
    metadata = ckpt.read_metadata(path)
    if _written_by_determined(path) or not ckpt.is_same_trial(trial_state or {"trial_id": 0}):
        return False
    saved = saved_identity(metadata, ckpt.read_load_data(path.parent, path.name))
    differs = identity.mismatch(saved, with_experiment=False)
    if differs is None:
        return False
    if os.environ.get(ALLOW_WARM_START_ENV, "").strip() == "1":
        return True
    raise errors.InvalidCheckpointException(
        f"{path} was written by another run: {differs} (that checkpoint's first, this run's "
        f"second). Resuming continues the run that wrote it; set {ALLOW_WARM_START_ENV}=1 to start "
        "from its weights, optimizer and callback state instead (a warm start, from batch 0), "
        "or name a checkpoint of this run."
    )


def _locate(
    requested: Optional[str], root: CheckpointStore, identity: RunIdentity
) -> Tuple[Optional[pathlib.Path], bool, Optional[str]]:
    """The (local) checkpoint directory to resume from, whether it is trusted, and its name.
    A checkpoint under a URL is downloaded into the cache first."""
    source = "fit(latest_checkpoint='latest')"
    if requested is None:
        requested = os.environ.get(LATEST_CHECKPOINT_ENV, "").strip() or None
        source = f"{LATEST_CHECKPOINT_ENV}=latest"
        if requested not in (None, "latest"):
            logger.info(f"Resuming from {LATEST_CHECKPOINT_ENV}={requested}.")
    if requested is None:
        return None, False, None
    if requested != "latest":
        return resolve_checkpoint(requested, root), True, requested
    for partial in remove_partials(root.staging()):
        logger.info(f"Deleted the unfinished checkpoint {partial}.")
    found = _latest_of_run(root, identity)
    damaged = root.damaged()
    if damaged:
        logger.warning(damaged_warning(source, damaged, found))
    if found is None:
        if not damaged:
            logger.info(
                f"{source}: no complete checkpoint under {root} yet; starting from the beginning."
            )
        return None, False, None
    logger.info(f"{source}: resuming from {found}.")
    return found.local_copy(), False, str(found)


def _latest_of_run(root: CheckpointStore, identity: RunIdentity) -> Optional[CheckpointStore]:
    """The newest checkpoint of this run under ``root``; for a trial of an experiment with
    none there, under the trial's directory of the layout before experiment ids
    (``<root>/trial-<n>``, whose checkpoints match by trial class and hyperparameters)."""
    roots = [root]
    if identity.experiment_id is not None and root.parent.name == identity.experiment_id:
        roots.append(root.parent.parent / root.name)
    for where in roots:
        found, passed = where.latest_of_run(identity)
        if passed:
            logger.info(
                f"latest: passed over {len(passed)} checkpoint(s) of other runs under {where}: "
                + ", ".join(passed)
            )
        if found is not None:
            return found
    return None


def damaged_warning(
    source: str, damaged: List[Tuple[CheckpointStore, List[str]]], found: Optional[CheckpointStore]
) -> str:
    """What ``latest`` says of checkpoints it cannot resume from: each one and what it lacks,
    where it resumes instead, and how to proceed.

    >>> print(damaged_warning("latest", [("/c/a1", ["metadata.json"])], None))
    latest: skipped 1 damaged checkpoint(s), which lack files:
      /c/a1 (no metadata.json)
    No complete checkpoint is left: training STARTS FROM THE BEGINNING. To resume instead,
    restore the missing files, or name a checkpoint (its path or UUID) in latest_checkpoint or
    $DET_LIGHTNING_LATEST_CHECKPOINT; to start over without this warning, delete or move the
    damaged directories.
    """
    listed = "".join(f"\n  {path} (no {', '.join(missing)})" for path, missing in damaged)
    head = f"{source}: skipped {len(damaged)} damaged checkpoint(s), which lack files:{listed}\n"
    if found is not None:
        return head + (
            f"Resuming from {found}, the newest complete checkpoint, instead. Delete or move "
            "the damaged directories to stop this warning."
        )
    return head + (
        "No complete checkpoint is left: training STARTS FROM THE BEGINNING. To resume instead,"
        "\nrestore the missing files, or name a checkpoint (its path or UUID) in "
        f"latest_checkpoint or\n${LATEST_CHECKPOINT_ENV}; to start over without this warning, "
        "delete or move the\ndamaged directories."
    )


def resolve_checkpoint(latest_checkpoint: str, root: CheckpointStore) -> pathlib.Path:
    """A checkpoint path or URL (with ``root``'s endpoint and keys when of its scheme), or a
    UUID under ``root``; a URL's checkpoint is downloaded.

    Raises:
        InvalidCheckpointException: nothing of that name exists.
    """
    if is_url(latest_checkpoint):
        return checkpoint_location(latest_checkpoint, beside=root).local_copy()
    path = pathlib.Path(latest_checkpoint).expanduser()
    if path.is_dir():
        return path
    under_root = root.fetch(latest_checkpoint)  # a bucket's: downloaded (or refused)
    if under_root.is_dir():
        return under_root
    raise errors.InvalidCheckpointException(
        f"fit(latest_checkpoint={latest_checkpoint!r}): no such checkpoint directory, and no "
        f"checkpoint of that UUID under {root}. Pass a checkpoint directory, a UUID under the "
        "checkpoint directory, or 'latest'."
    )


def _read_state_dict(path: pathlib.Path, trust: bool) -> Dict[str, Any]:
    """``state_dict.pth`` of ``path``, weights only unless ``trust`` and the real Determined
    wrote it (its ``state_dict.pth`` pickles numpy RNG state)."""
    try:
        return ckpt.read_state_dict(path)
    except errors.InvalidCheckpointException as e:
        refused = e.__cause__ is not None and ckpt.refused_by_weights_only(e.__cause__)
        if not (trust and refused and _written_by_determined(path)):
            raise
        logger.warning(
            f"{path} was written by Determined itself and pickles numpy objects; loading it "
            "with full unpickling (torch.load(weights_only=False)) because you chose it to "
            "resume from. Only do this with checkpoints you trust."
        )
        return ckpt.read_state_dict(path, weights_only=False)


def _written_by_determined(path: pathlib.Path) -> bool:
    return "det_lightning_version" not in ckpt.read_metadata(path)


def apply_state(module: TrialModule, state: Dict[str, Any]) -> None:
    """Restores models, optimizers, schedulers, callbacks, RNG and scaler from ``state``."""
    module.det_hooks.on_checkpoint_load_start(state)
    stateful.restore(stateful.trial_slots(module.context, module.det_callbacks), state)


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
