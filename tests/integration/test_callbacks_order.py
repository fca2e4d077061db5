"""``PyTorchCallback`` hooks fire in Determined's order with its arguments, beside Lightning's.

The same recording callback runs under the real Determined 0.38.1 and under det_lightning on a
schedule of 2 epochs (8 batches each), 3 validations and 2 checkpoints; the hook sequences must
be identical. A counting Lightning callback in the det_lightning run checks Lightning's own hooks.
"""

import pathlib
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from det_lightning import pytorch as dl_pytorch
from det_lightning.pytorch import _checkpoint as ckpt
from tests.fixtures.trials import make_trials, seed_everything

Event = Tuple[Any, ...]

SCHEDULE = dict(
    max_length=("Epoch", 2),
    validation_period=("Batch", 6),
    checkpoint_period=("Batch", 10),
    reporting_period=("Batch", 4),
)
HPARAMS = {"n": 64, "batch_size": 8, "lr": 0.05}


def recorder_class(api: Any, with_values: bool) -> type:
    """A ``PyTorchCallback`` for ``api`` that records each hook call as a comparable tuple."""

    def keys(checkpoint: Dict[str, Any]) -> List[str]:
        return sorted(k for k in checkpoint if k != ckpt.EXTRA)  # our extra key aside

    class HookRecorder(api.PyTorchCallback):
        def __init__(self) -> None:
            self.events: List[Event] = []
            self.uuids: List[str] = []

        def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
            self.events.append(("on_trial_startup", first_batch_idx, checkpoint_uuid))

        def on_trial_shutdown(self) -> None:
            self.events.append(("on_trial_shutdown",))

        def on_training_start(self) -> None:
            self.events.append(("on_training_start",))

        def on_training_epoch_start(self, epoch_idx: int) -> None:
            self.events.append(("on_training_epoch_start", epoch_idx))

        def on_training_epoch_end(self, epoch_idx: int) -> None:
            self.events.append(("on_training_epoch_end", epoch_idx))

        def on_training_workload_end(self, avg_metrics: Dict, batch_metrics: List) -> None:
            event: Event = (
                "on_training_workload_end",
                sorted(avg_metrics),
                avg_metrics["batches"],
                avg_metrics["epochs"],
                len(batch_metrics),
            )
            if with_values:
                event += (float(avg_metrics["loss"]), [float(m["loss"]) for m in batch_metrics])
            self.events.append(event)

        def on_validation_start(self) -> None:
            self.events.append(("on_validation_start",))

        def on_validation_epoch_start(self) -> None:
            self.events.append(("on_validation_epoch_start",))

        def on_validation_epoch_end(self, outputs: List[Any]) -> None:
            self.events.append(("on_validation_epoch_end", len(outputs)))

        def on_validation_end(self, metrics: Dict[str, Any]) -> None:
            values = {k: float(v) for k, v in metrics.items()} if with_values else sorted(metrics)
            self.events.append(("on_validation_end", values))

        def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
            self.events.append(("on_checkpoint_load_start", keys(checkpoint)))

        def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
            self.events.append(("on_checkpoint_save_start", keys(checkpoint)))

        def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
            complete = (pathlib.Path(checkpoint_dir) / "state_dict.pth").is_file()
            self.events.append(("on_checkpoint_write_end", complete))

        def on_checkpoint_upload_end(self, uuid: str) -> None:
            self.uuids.append(uuid)
            self.events.append(("on_checkpoint_upload_end", len(uuid)))

        def state_dict(self) -> Dict[str, Any]:
            self.events.append(("state_dict",))
            return {"events_so_far": len(self.events)}

        def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
            self.events.append(("load_state_dict", dict(state_dict)))

    return HookRecorder


class LightningHookCounter(Callback):
    """Counts every Lightning callback hook it sees (composer's ``EventCounterCallback``)."""

    HOOKS = (
        "setup",
        "teardown",
        "on_fit_start",
        "on_fit_end",
        "on_train_start",
        "on_train_end",
        "on_train_epoch_start",
        "on_train_epoch_end",
        "on_train_batch_start",
        "on_train_batch_end",
        "on_validation_start",
        "on_validation_end",
        "on_validation_epoch_start",
        "on_validation_epoch_end",
        "on_validation_batch_start",
        "on_validation_batch_end",
        "on_sanity_check_start",
        "on_save_checkpoint",
        "on_load_checkpoint",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_exception",
    )

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.HOOKS, 0)

    def __getattribute__(self, name: str) -> Any:
        if name in LightningHookCounter.HOOKS:
            counts = object.__getattribute__(self, "counts")

            def count(*args: Any, **kwargs: Any) -> None:
                counts[name] += 1

            return count
        return object.__getattribute__(self, name)


def _units(api: Any) -> Dict[str, Any]:
    return {name: getattr(api, unit)(value) for name, (unit, value) in SCHEDULE.items()}


def fit_recorded(
    api: Any,
    with_values: bool = True,
    latest_checkpoint: Optional[str] = None,
    trainer_kwargs: Optional[Dict[str, Any]] = None,
    fail_at_batch: Optional[int] = None,
    recorder: Any = None,
) -> Any:
    """Fits MLPTrial with a ``HookRecorder`` under ``api``; returns the recorder."""
    base = make_trials(api)["MLPTrial"]
    recorder = recorder or recorder_class(api, with_values)()

    class RecordedTrial(base):  # type: ignore[valid-type, misc]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            if batch_idx == fail_at_batch:
                raise RuntimeError(f"failing at batch {batch_idx}")
            return super().train_batch(batch, epoch_idx, batch_idx)

        def build_callbacks(self) -> Dict[str, Any]:
            return {"hooks": recorder}

    seed_everything(5)
    with api.init(hparams=dict(HPARAMS)) as context:
        trial = RecordedTrial(context)
        trainer = api.Trainer(trial, context, **(trainer_kwargs or {}))
        trainer.fit(checkpoint_policy="none", latest_checkpoint=latest_checkpoint, **_units(api))
    return recorder


def _names(events: List[Event]) -> List[str]:
    return [e[0] for e in events]


@pytest.mark.interop
def test_hook_sequence_matches_real_determined() -> None:
    from determined import pytorch as det_pytorch

    theirs = fit_recorded(det_pytorch).events
    ours = fit_recorded(dl_pytorch).events

    assert ours == theirs
    names = _names(ours)
    assert names.count("on_validation_end") == 3
    assert names.count("on_checkpoint_upload_end") == 2
    assert names.count("on_training_epoch_end") == 2
    assert names[0] == "on_trial_startup" and names[-1] == "on_trial_shutdown"
    # A checkpoint's hooks run in this order, state_dict() first.
    first_save = names.index("state_dict")
    assert names[first_save : first_save + 4] == [
        "state_dict",
        "on_checkpoint_save_start",
        "on_checkpoint_write_end",
        "on_checkpoint_upload_end",
    ]


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore:Environment variable TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
def test_hook_sequence_after_resume_matches_real_determined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Resuming from the checkpoint at batch 10. Determined's local mode forgets the batches
    trained (it restarts its batch count at 0); on a cluster the master passes them in, which
    is what det_lightning does and what the patched controller here does too."""
    from determined import pytorch as det_pytorch
    from determined.pytorch import _pytorch_trial

    original_init = _pytorch_trial._PyTorchTrialController.__init__

    def as_on_a_cluster(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["steps_completed"] = 10 if kwargs["latest_checkpoint"] else 0
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(_pytorch_trial._PyTorchTrialController, "__init__", as_on_a_cluster)

    sequences = []
    for api in (det_pytorch, dl_pytorch):
        first = fit_recorded(api)
        resumed = fit_recorded(api, with_values=False, latest_checkpoint=first.uuids[0])
        assert resumed.events[0] == ("on_trial_startup", 10, first.uuids[0])
        sequences.append(resumed.events[1:])
    theirs, ours = sequences
    assert ours == theirs
    assert ours[:3] == [
        (
            "on_checkpoint_load_start",
            [
                "callbacks",
                "lr_schedulers_state_dict",
                "models_state_dict",
                "optimizers_state_dict",
                "rng_state",
            ],
        ),
        ("load_state_dict", {"events_so_far": 14}),
        ("on_training_start",),
    ]


@pytest.mark.interop
def test_shutdown_hook_runs_after_an_error_as_in_real_determined() -> None:
    from determined import pytorch as det_pytorch

    sequences = []
    for api in (det_pytorch, dl_pytorch):
        recorder = recorder_class(api, with_values=False)()
        with pytest.raises(RuntimeError, match="failing at batch 3"):
            fit_recorded(api, fail_at_batch=3, recorder=recorder)
        sequences.append(recorder.events)
    theirs, ours = sequences
    assert ours == theirs
    assert _names(ours) == [
        "on_trial_startup",
        "on_training_start",
        "on_training_epoch_start",
        "on_trial_shutdown",
    ]


def test_lightning_callback_hook_counts_beside_pytorch_callbacks() -> None:
    counter = LightningHookCounter()
    recorder = fit_recorded(dl_pytorch, trainer_kwargs={"callbacks": [counter]})

    assert counter.counts == {
        "setup": 1,
        "teardown": 1,
        "on_fit_start": 1,
        "on_fit_end": 1,
        "on_train_start": 1,
        "on_train_end": 1,
        "on_train_epoch_start": 2,
        "on_train_epoch_end": 2,
        "on_train_batch_start": 16,
        "on_train_batch_end": 16,
        "on_validation_start": 3,
        "on_validation_end": 3,
        "on_validation_epoch_start": 3,
        "on_validation_epoch_end": 3,
        "on_validation_batch_start": 12,
        "on_validation_batch_end": 12,  # 4 batches each
        "on_sanity_check_start": 0,
        "on_save_checkpoint": 2,
        "on_load_checkpoint": 0,
        "on_before_backward": 16,
        "on_after_backward": 16,
        "on_before_optimizer_step": 16,
        "on_exception": 0,
    }
    assert _names(recorder.events).count("on_validation_end") == counter.counts["on_validation_end"]


def test_lightning_callback_hook_counts_after_resume() -> None:
    first = fit_recorded(dl_pytorch)
    counter = LightningHookCounter()
    fit_recorded(
        dl_pytorch, latest_checkpoint=first.uuids[0], trainer_kwargs={"callbacks": [counter]}
    )

    # Batches 10..15: the rest of epoch 1, validations at 12 and 16, the final checkpoint.
    assert counter.counts["on_train_batch_end"] == 6
    assert counter.counts["on_train_epoch_start"] == 1
    assert counter.counts["on_train_epoch_end"] == 1
    assert counter.counts["on_validation_end"] == 2
    assert counter.counts["on_save_checkpoint"] == 1
    assert counter.counts["on_fit_start"] == counter.counts["on_fit_end"] == 1


def test_deprecated_on_checkpoint_end_still_fires_before_write_end() -> None:
    order: List[str] = []

    class Legacy(dl_pytorch.PyTorchCallback):
        def on_checkpoint_end(self, checkpoint_dir: str) -> None:
            order.append("on_checkpoint_end")

        def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
            order.append("on_checkpoint_write_end")

    trial_class = make_trials(dl_pytorch)["OneVarTrial"]

    class LegacyTrial(trial_class):  # type: ignore[valid-type, misc]
        def build_callbacks(self) -> Dict[str, Any]:
            return {"legacy": Legacy()}

    with dl_pytorch.init(hparams={}) as context:
        trial = LegacyTrial(context)
        with pytest.warns(FutureWarning, match="on_checkpoint_write_end instead"):
            dl_pytorch.Trainer(trial, context).fit(max_length=dl_pytorch.Batch(2))
    assert order == ["on_checkpoint_end", "on_checkpoint_write_end"]
    assert torch.is_tensor(trial.model.weight)
