"""The lean step's shortcuts (``adapters/lightning/lean_step.py``: ``BackendFastPath``, the hooks it
skips when no callback overrides them) against Lightning's own code, where the trace tests in
``test_hooks.py`` do not look: what the optimizer's step sees."""

import contextlib
from collections import Counter
from typing import Any, Iterator, List, Tuple

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch.optim.optimizer import register_optimizer_step_pre_hook

from det_lightning import pytorch
from det_lightning.adapters import profiler_labels
from det_lightning.adapters.lightning import hooks, lean, lean_step
from tests.fixtures.run import run_trial

Seen = List[Tuple[str, int, Tuple[str, ...]]]


def _fit(seen: Seen, hook_optimizer: bool) -> None:
    """A fit whose optimizer step pre-hooks (one on the optimizer, one global) record the step's
    keyword arguments; a callback overriding ``on_before_optimizer_step`` joins at batch 3."""

    class Joiner(Callback):
        def on_before_optimizer_step(self, trainer: Any, *args: Any) -> None:
            seen.append(("callback", trainer.global_step, ()))

    class Hooker(Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if hook_optimizer:
                trainer.optimizers[0].register_step_pre_hook(
                    lambda opt, args, kwargs: seen.append(
                        ("optimizer", trainer.global_step, tuple(sorted(kwargs)))
                    )
                )

        def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
            if args[-1] == 3:
                trainer.callbacks.append(Joiner())

    run_trial(
        pytorch,
        "MLPTrial",
        {"lr": 0.01},
        trainer_kwargs={"callbacks": [Hooker()], "logger": False},
        max_length=pytorch.Batch(6),
    )


@pytest.mark.parametrize("hook_optimizer", [True, False], ids=["optimizer-hook", "global-hook"])
def test_optimizer_step_hooks_see_the_step_as_under_lightning(
    monkeypatch: pytest.MonkeyPatch, hook_optimizer: bool
) -> None:
    """The lean step leaves out Lightning's do-nothing closure only when nothing could see it:
    a step pre-hook (the optimizer's, or a global one) sees ``closure=`` as under Lightning's
    own step, and a callback's ``on_before_optimizer_step`` still runs inside the step."""

    def run() -> Seen:
        seen: Seen = []
        handle = None
        if not hook_optimizer:
            handle = register_optimizer_step_pre_hook(
                lambda opt, args, kwargs: seen.append(("global", -1, tuple(sorted(kwargs))))
            )
        try:
            _fit(seen, hook_optimizer)
        finally:
            if handle is not None:
                handle.remove()
        return seen

    lean_seen = run()
    monkeypatch.setenv(lean.LEAN_ENV, "0")
    plain_seen = run()
    assert lean_seen == plain_seen
    assert any(kwargs == ("closure",) for _, _, kwargs in lean_seen)
    assert ("callback", 3, ()) in lean_seen


def test_a_step_no_hook_can_see_goes_without_the_closure() -> None:
    """Which optimizers the lean step may step without Lightning's closure: torch.optim's own
    (LBFGS needs the closure's loss), not a subclass of them (its step may use the closure),
    and none with step hooks (they see the step's arguments)."""
    params = [torch.nn.Parameter(torch.zeros(2))]

    class MySGD(torch.optim.SGD):
        pass

    sgd = torch.optim.SGD(params, lr=0.1)
    assert lean_step._closure_optional(sgd)
    assert lean_step._closure_optional(torch.optim.Adam(params))
    assert not lean_step._closure_optional(torch.optim.LBFGS(params))
    assert not lean_step._closure_optional(MySGD(params, lr=0.1))
    handle = sgd.register_step_post_hook(lambda *_: None)
    assert not lean_step._closure_optional(sgd)
    handle.remove()
    handle = register_optimizer_step_pre_hook(lambda *_: None)
    assert not lean_step._closure_optional(sgd)
    handle.remove()
    assert lean_step._closure_optional(sgd)


def test_busy_hooks_follow_the_callback_list() -> None:
    """``BusyHooks`` names the hooks some callback overrides, worked out again when the list
    changes (in place or replaced); without the lean dispatch every hook is busy."""

    class Saver(Callback):
        def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
            pass

    class FakeTrainer:
        def __init__(self) -> None:
            self.callbacks: List[Callback] = [Callback()]

    trainer = FakeTrainer()
    names = ("on_before_backward", "on_after_backward")
    watch = hooks.BusyHooks(trainer, names)
    assert watch.refresh() == frozenset(names)  # not marked for the lean dispatch
    hooks.use_lean_dispatch(trainer)
    try:
        assert watch.refresh() == frozenset()
        assert trainer.callbacks == watch.seen
        trainer.callbacks.append(Saver())
        assert trainer.callbacks != watch.seen
        assert watch.refresh() == frozenset({"on_after_backward"})
    finally:
        hooks.release(trainer)  # Lightning's own dispatch back, as after a fit


def test_backward_with_a_gradient_gives_lightnings_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``context.backward(loss, gradient=...)`` on a loss that is not a scalar: the fast path
    (called straight by the context) and Lightning's ``manual_backward`` give the same
    weights."""
    from tests.fixtures.trials import make_trials, seed_everything

    base = make_trials(pytorch)["MLPTrial"]

    class VectorLossTrial(base):  # type: ignore[misc,valid-type]
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            losses = ((self.model(x) - y) ** 2).squeeze(1)  # one loss per record
            weights = torch.linspace(0.5, 1.5, losses.shape[0])
            self.context.backward(losses, gradient=weights, retain_graph=True)
            self.context.step_optimizer(self.opt)
            return {"loss": losses.mean()}

    def run() -> List[torch.Tensor]:
        seed_everything(3)
        with pytorch.init(hparams={"lr": 0.01, "dropout": 0.0}) as context:
            trial = VectorLossTrial(context)
            pytorch.Trainer(trial, context, logger=False).fit(max_length=pytorch.Batch(5))
        return [p.detach().clone() for p in trial.model.parameters()]

    lean_weights = run()
    monkeypatch.setenv(lean.LEAN_ENV, "0")
    plain_weights = run()
    for a, b in zip(lean_weights, plain_weights):
        assert torch.equal(a, b)


@contextlib.contextmanager
def _counting_labels(monkeypatch: pytest.MonkeyPatch, labels_on: str) -> Iterator[Counter]:
    """torch's ``record_function`` labels opened inside, counted by name, with
    ``DET_LIGHTNING_LEAN_LABELS`` set to ``labels_on``."""
    opened: Counter = Counter()
    original = torch.autograd.profiler.record_function

    class Counting(original):  # type: ignore[misc,valid-type]
        def __init__(self, name: str, args: Any = None) -> None:
            opened[name.split("#")[0]] += 1
            super().__init__(name, args)

    monkeypatch.setenv(profiler_labels.LABELS_ENV, labels_on)
    with monkeypatch.context() as patch:
        patch.setattr(torch.autograd.profiler, "record_function", Counting)
        yield opened


def _fit_counting_labels(monkeypatch: pytest.MonkeyPatch, labels_on: str) -> Tuple[Any, Counter]:
    """A fit of 6 batches with torch's ``record_function`` labels counted by name."""
    with _counting_labels(monkeypatch, labels_on) as opened:
        trial, _ = run_trial(
            pytorch,
            "MLPTrial",
            {"lr": 0.01},
            trainer_kwargs={"logger": False},
            max_length=pytorch.Batch(6),
        )
    return trial, opened


def test_training_batches_go_without_torchs_profiler_labels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While no profiler records, the training loop opens none of torch's three labels per batch
    (the optimizer's step and zero_grad, the loader's next batch), nor validation one per batch;
    the same weights as with them."""
    lean_trial, lean = _fit_counting_labels(monkeypatch, "1")
    plain_trial, plain = _fit_counting_labels(monkeypatch, "0")
    assert plain["Optimizer.step"] == plain["Optimizer.zero_grad"] == 6
    # 6 training batches, the validation batches and the end of each validation pass
    assert plain["enumerate(DataLoader)"] > 6
    assert lean == Counter()
    for ours, theirs in zip(lean_trial.model.parameters(), plain_trial.model.parameters()):
        assert torch.equal(ours, theirs)


def test_a_plain_torch_loader_goes_without_the_label_in_every_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trial that returns torch's own ``DataLoader`` (2 batches a pass, 6 batches: three
    passes, each a new iterator): no pass opens the loader's label, and the batches are the
    ones the labelled iterator gives."""
    from tests.fixtures.trials import make_trials, regression_data, seed_everything

    base = make_trials(pytorch)["MLPTrial"]

    class PlainLoaderTrial(base):  # type: ignore[misc,valid-type]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.experimental.disable_dataset_reproducibility_checks()

        def build_training_data_loader(self) -> Any:
            return torch.utils.data.DataLoader(regression_data(16), batch_size=8, shuffle=True)

    def run(labels_on: str) -> Tuple[Any, Counter]:
        with _counting_labels(monkeypatch, labels_on) as opened:
            seed_everything(3)
            with pytorch.init(hparams={"lr": 0.01}) as context:
                trial = PlainLoaderTrial(context)
                pytorch.Trainer(trial, context, logger=False).fit(max_length=pytorch.Batch(6))
        return trial, opened

    lean_trial, lean = run("1")
    plain_trial, plain = run("0")
    assert plain["enumerate(DataLoader)"] >= 6 + 2  # every training batch, and each pass's end
    assert lean == Counter()
    assert len(lean_trial.seen) == 6 and lean_trial.seen == plain_trial.seen
    for ours, theirs in zip(lean_trial.model.parameters(), plain_trial.model.parameters()):
        assert torch.equal(ours, theirs)


def test_a_profiler_sees_every_training_label() -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run_trial(
            pytorch,
            "MLPTrial",
            {"lr": 0.01},
            trainer_kwargs={"logger": False},
            max_length=pytorch.Batch(6),
        )
    counts = {event.key: event.count for event in profile.key_averages()}
    assert counts["Optimizer.step#SGD.step"] == 6
    assert counts["Optimizer.zero_grad#SGD.zero_grad"] == 6
    assert counts["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] >= 6
