"""``adapters/profiler_labels.py``: torch's profiler labels left out of the training loop while
no profiler records, and only then; the same steps, gradients and batches as torch's calls."""

import warnings
from typing import Any, Callable, Dict, Iterator, List

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from det_lightning.adapters import profiler_labels
from det_lightning.adapters.lightning import versions
from det_lightning.adapters.profiler_labels import LabelFree


@pytest.fixture
def labels(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """The names of the ``record_function`` labels torch opens from now on."""
    opened: List[str] = []
    original = torch.autograd.profiler.record_function

    class Counting(original):  # type: ignore[misc,valid-type]
        def __init__(self, name: str, args: Any = None) -> None:
            opened.append(name)
            super().__init__(name, args)

    monkeypatch.setattr(torch.autograd.profiler, "record_function", Counting)
    monkeypatch.delenv(profiler_labels.LABELS_ENV, raising=False)
    monkeypatch.delenv(versions.LEAN_ENV, raising=False)
    return opened


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


OPTIMIZERS: Dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
}


def _train(optimizer_name: str, step: Callable, zero_grad: Callable) -> Dict[str, Any]:
    model = _model()
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())
    data = torch.Generator().manual_seed(1)
    for _ in range(5):
        x = torch.randn(16, 4, generator=data)
        model(x).pow(2).mean().backward()
        step(optimizer)
        zero_grad(optimizer)
        assert all(p.grad is None for p in model.parameters())
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


@pytest.mark.parametrize("optimizer_name", sorted(OPTIMIZERS))
def test_steps_and_zeroing_without_labels_match_torchs(
    labels: List[str], optimizer_name: str
) -> None:
    free = LabelFree()
    ours = _train(optimizer_name, free.step, free.zero_grad)
    assert labels == []
    theirs = _train(optimizer_name, lambda o: o.step(), lambda o: o.zero_grad())
    assert len(labels) == 10  # torch's own: a step and a zero_grad label per batch
    for key, value in theirs["model"].items():
        assert torch.equal(ours["model"][key], value), key
    assert repr(ours["optimizer"]) == repr(theirs["optimizer"])


def _scheduled(step: Callable) -> List[float]:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    rates = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when the scheduler steps before the optimizer
        for _ in range(4):
            model(torch.ones(2, 4)).sum().backward()
            step(optimizer)
            scheduler.step()
            rates.append(optimizer.param_groups[0]["lr"])
    return rates + [float(p.detach().sum()) for p in model.parameters()]


def test_a_scheduled_optimizer_is_stepped_as_its_scheduler_sees_it(labels: List[str]) -> None:
    """An LR scheduler replaces its optimizer's ``step`` to note that it ran (else it warns that
    it stepped first): the unlabelled step notes it as that wrapper does."""
    ours = _scheduled(LabelFree().step)
    assert labels == []
    assert ours == _scheduled(lambda o: o.step())
    assert len(labels) == 4


def test_another_replaced_step_is_called(labels: List[str]) -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    calls: List[int] = []
    original = optimizer.step

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    optimizer.step = counted  # type: ignore[method-assign]
    model(torch.ones(1, 4)).sum().backward()
    LabelFree().step(optimizer)
    assert calls == [1]
    assert labels == ["Optimizer.step#SGD.step"]


def _loader(shuffle: bool) -> torch.utils.data.DataLoader:
    data = torch.utils.data.TensorDataset(torch.arange(40.0).reshape(20, 2))
    return torch.utils.data.DataLoader(data, batch_size=3, shuffle=shuffle)


def _drain(fetch: Callable[[], Any]) -> List[Any]:
    out = []
    while True:
        try:
            out.append(fetch())
        except StopIteration:
            return out


@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "shuffled"])
def test_batches_without_labels_match_torchs(labels: List[str], shuffle: bool) -> None:
    torch.manual_seed(5)
    iterator = iter(_loader(shuffle))
    ours = _drain(LabelFree().fetcher(iterator))
    assert labels == []
    assert iterator._num_yielded == 7  # type: ignore[attr-defined] # (counted as __next__ counts)
    torch.manual_seed(5)
    theirs = _drain(iter(_loader(shuffle)).__next__)
    assert len(labels) == 8  # torch's: one per batch, and the call that ends the pass
    assert len(ours) == len(theirs) == 7
    for a, b in zip(ours, theirs):
        assert torch.equal(a[0], b[0])


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.arange(4.0))


def test_an_iterable_dataset_keeps_torchs_next(labels: List[str]) -> None:
    """``__next__`` warns about an iterable dataset's length: the fetch is torch's own."""
    iterator = iter(torch.utils.data.DataLoader(_Stream(), batch_size=2))
    assert len(_drain(LabelFree().fetcher(iterator))) == 2
    assert len(labels) == 3


def test_labels_while_a_profiler_records(labels: List[str]) -> None:
    """A profiler sees the three labels of each batch, as with torch's calls."""
    free = LabelFree()
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fetch = free.fetcher(iter(torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=4)))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        assert profiler_labels.recording()
        for _ in range(2):
            model(fetch()).sum().backward()
            free.step(optimizer)
            free.zero_grad(optimizer)
    assert not profiler_labels.recording()
    counts = {event.key: event.count for event in profile.key_averages()}
    assert counts["Optimizer.step#SGD.step"] == 2
    assert counts["Optimizer.zero_grad#SGD.zero_grad"] == 2
    assert counts["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] == 2
    assert len(labels) == 6


def test_a_step_hook_gets_torchs_step(labels: List[str]) -> None:
    """Step hooks run inside torch's wrapper: with one registered, the step is torch's."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: List[str] = []
    optimizer.register_step_pre_hook(lambda *_: seen.append("pre"))
    handle = register_optimizer_step_post_hook(lambda *_: seen.append("global post"))
    try:
        model(torch.ones(1, 4)).sum().backward()
        LabelFree().step(optimizer)
    finally:
        handle.remove()
    assert seen == ["pre", "global post"]
    assert labels == ["Optimizer.step#SGD.step"]


def test_an_overridden_zero_grad_runs(labels: List[str]) -> None:
    class Halving(torch.optim.SGD):
        def zero_grad(self, set_to_none: bool = True) -> None:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad.mul_(0.5)

    model = _model()
    optimizer = Halving(model.parameters(), lr=0.1)
    model(torch.ones(1, 4)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    LabelFree().zero_grad(optimizer)
    assert all(torch.equal(p.grad, b * 0.5) for p, b in zip(model.parameters(), before))


def test_a_zero_grad_replaced_on_the_instance_runs(labels: List[str]) -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    calls: List[bool] = []
    optimizer.zero_grad = lambda set_to_none=True: calls.append(set_to_none)  # type: ignore[method-assign]
    LabelFree().zero_grad(optimizer)
    assert calls == [True]


def test_a_subclass_step_is_stepped_without_its_label(labels: List[str]) -> None:
    """A user's optimizer overriding ``step`` gets torch's wrapper too: its own step runs, without
    the outer label (its ``super().step()`` is torch's wrapped step, label and all, once an
    ``SGD`` was made: torch wraps a class's step when its first instance is made)."""
    calls: List[int] = []

    class Counting(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            calls.append(1)
            return super().step(closure)

    model = _model()
    torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer = Counting(model.parameters(), lr=0.1)
    model(torch.ones(1, 4)).sum().backward()
    LabelFree().step(optimizer)
    assert calls == [1]
    assert labels == ["Optimizer.step#Counting.step"]  # (the label names the instance's class)
    optimizer.step()
    assert labels[1:] == ["Optimizer.step#Counting.step"] * 2


@pytest.mark.parametrize("env", [profiler_labels.LABELS_ENV, versions.LEAN_ENV])
def test_the_environment_keeps_every_label(
    labels: List[str], monkeypatch: pytest.MonkeyPatch, env: str
) -> None:
    monkeypatch.setenv(env, "0")
    _train("sgd-momentum", LabelFree().step, LabelFree().zero_grad)
    _drain(LabelFree().fetcher(iter(_loader(False))))
    assert len(labels) == 10 + 8


def test_a_torch_not_read_keeps_every_label(
    labels: List[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another torch's functions (another fingerprint) are called as torch has them."""
    monkeypatch.setattr(
        profiler_labels, "READ", {name: frozenset() for name in profiler_labels.READ}
    )
    profiler_labels.unchanged.cache_clear()
    try:
        free = LabelFree()
        assert not (free.steps or free.zeroes or free.fetches)
        _train("adam", free.step, free.zero_grad)
        assert len(labels) == 10
    finally:
        profiler_labels.unchanged.cache_clear()


def test_the_installed_torch_is_one_read() -> None:
    """The torch this suite runs is one whose functions ``READ`` holds. Failing here: torch
    changed one; read its new source against the module docstring's table, then add the
    fingerprint printed here to ``READ`` (or change the unlabelled call to follow it)."""
    changed = {
        name: profiler_labels.installed_fingerprint(name)
        for name in profiler_labels.READ
        if not profiler_labels.unchanged(name)
    }
    assert changed == {}, f"torch {torch.__version__}: {changed}"


def test_the_report_names_each_function_and_whether_it_was_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = profiler_labels.report().splitlines()
    assert lines[0].startswith(f"torch {torch.__version__}")
    assert len(lines) == 1 + len(profiler_labels.READ)
    assert all(line.endswith(" read") for line in lines[1:])
    monkeypatch.setitem(profiler_labels.READ, profiler_labels.NEXT, frozenset())
    assert "_BaseDataLoaderIter.__next__: " in profiler_labels.report()
    assert profiler_labels.report().count("NOT READ") == 1
