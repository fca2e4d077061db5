"""The stateful slots: one save loop and one restore loop over everything a checkpoint holds."""

import logging
import random
import types
from typing import Any, Dict, Optional

import pytest
import torch
from torch import nn

from det_lightning import errors
from det_lightning.adapters import stateful
from det_lightning.pytorch import _checkpoint as ckpt


class _Counter:
    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> Dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.count = state["count"]


def _context(scaler: Optional[Any] = None) -> types.SimpleNamespace:
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return types.SimpleNamespace(
        models=[nn.DataParallel(model)],
        optimizers=[optimizer],
        lr_schedulers=[torch.optim.lr_scheduler.StepLR(optimizer, 3)],
        device=torch.device("cpu"),
        engine=types.SimpleNamespace(scaler=scaler),
    )


def _train_a_step(context: types.SimpleNamespace) -> None:
    context.models[0](torch.ones(4, 2)).sum().backward()
    context.optimizers[0].step()
    context.lr_schedulers[0].step()


def test_the_slots_are_state_dict_pth_in_determineds_order() -> None:
    keys = [slot.key for slot in stateful.trial_slots(_context(), {})]
    assert keys == [
        ckpt.MODELS,
        ckpt.OPTIMIZERS,
        ckpt.LR_SCHEDULERS,
        ckpt.CALLBACKS,
        ckpt.RNG_STATE,
    ]
    scaled = stateful.trial_slots(_context(torch.amp.GradScaler("cpu")), {})
    assert scaled[-1].key == ckpt.SCALER


def test_save_then_restore_gives_back_every_object() -> None:
    source, counter = _context(torch.amp.GradScaler("cpu", init_scale=8.0)), _Counter()
    _train_a_step(source)
    counter.count = 5
    random.seed(3)
    state = stateful.save(stateful.trial_slots(source, {"counter": counter}))
    assert "module.weight" not in state[ckpt.MODELS][0]  # saved without the wrapper's prefix
    expected_draw = random.random()
    target, fresh = _context(torch.amp.GradScaler("cpu")), _Counter()
    stateful.restore(stateful.trial_slots(target, {"counter": fresh}), state)
    assert torch.equal(target.models[0].module.weight, source.models[0].module.weight)
    assert target.optimizers[0].state_dict() == source.optimizers[0].state_dict()
    assert target.lr_schedulers[0].last_epoch == 1
    assert target.engine.scaler.get_scale() == 8.0 and fresh.count == 5
    assert random.random() == expected_draw


def test_older_determineds_single_object_keys_load_as_lists() -> None:
    source = _context()
    _train_a_step(source)
    old = {
        "model_state_dict": source.models[0].module.state_dict(),
        "optimizer_state_dict": source.optimizers[0].state_dict(),
        "lr_scheduler": source.lr_schedulers[0].state_dict(),
    }
    target = _context()
    stateful.restore(stateful.trial_slots(target, {}), old, warn=False)
    assert torch.equal(target.models[0].module.bias, source.models[0].module.bias)
    assert target.lr_schedulers[0].last_epoch == 1


def test_missing_optimizer_state_is_a_mismatch_and_missing_rng_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = _context(torch.amp.GradScaler("cpu"))
    state = stateful.save(stateful.trial_slots(context, {}))
    without_rng = {k: v for k, v in state.items() if k not in (ckpt.RNG_STATE, ckpt.SCALER)}
    with caplog.at_level(logging.WARNING, logger="det_lightning.pytorch"):
        stateful.restore(stateful.trial_slots(context, {}), without_rng)
    assert "no random state" in caplog.text and "no scaler state" in caplog.text
    caplog.clear()
    stateful.restore(stateful.trial_slots(context, {}), without_rng, warn=False)
    assert caplog.text == ""
    del without_rng[ckpt.OPTIMIZERS]
    with pytest.raises(errors.InvalidCheckpointException, match="0 optimizer state dicts"):
        stateful.restore(stateful.trial_slots(context, {}), without_rng)


def test_a_callback_the_checkpoint_does_not_know_keeps_its_state() -> None:
    known, new = _Counter(), _Counter()
    new.count = 7
    slots = stateful.trial_slots(_context(), {"known": known, "new": new})
    callbacks = [slot for slot in slots if slot.key == ckpt.CALLBACKS]
    stateful.restore(callbacks, {ckpt.CALLBACKS: {"known": {"count": 2}}})
    assert (known.count, new.count) == (2, 7)
