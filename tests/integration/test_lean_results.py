"""The lean ``self.log`` (``adapters/lightning/lean_results.py``): its walk finds every tensor
Lightning's ``_ResultMetric.to`` would move, it keeps a metric only when that ``to`` would move
nothing, and the metrics it keeps are those Lightning's own code leaves."""

import collections
import dataclasses
import pathlib
from typing import Any, Dict, List

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.trainer.connectors.logger_connector.result import (
    _ResultCollection,
    _ResultMetric,
)
from lightning_utilities.core.apply_func import apply_to_collection
from torchmetrics import Metric
from torchmetrics.aggregation import MeanMetric

from det_lightning import pytorch
from det_lightning.adapters.lightning import lean_results, versions
from det_lightning.adapters.lightning.lean_results import (
    LeanResultCollection,
    LeanResultMetric,
    stays_on,
)
from tests.fixtures.run import run_trial

CPU = torch.device("cpu")
ELSEWHERE = torch.device("meta")  # a device no tensor of a CPU run is on


def _reached(data: Any) -> List[Any]:
    """The tensors and metrics Lightning's ``_ResultMetric.to`` moves in ``data``."""
    found: List[Any] = []
    apply_to_collection(data, (torch.Tensor, Metric), lambda x: found.append(x) or x)
    return found


def _moved(data: Any, target: Any) -> Any:
    """``data`` with the one tensor ``target`` put on ``ELSEWHERE``."""
    return apply_to_collection(
        data,
        torch.Tensor,
        lambda x: torch.empty(x.shape, device=ELSEWHERE) if x is target else x,
    )


@dataclasses.dataclass
class _Holder:
    value: Any
    other: int = 0


Pair = collections.namedtuple("Pair", "left right")


def _logged(collection: _ResultCollection, values: List[float]) -> _ResultCollection:
    for step, value in enumerate(values):
        collection.batch_size = None
        collection.log("validation_step", "loss", torch.tensor(value), on_step=True)
        collection.log("validation_step", "seen", torch.tensor(float(step)), reduce_fx="max")
    return collection


def _shapes(tensor: torch.Tensor) -> List[Any]:
    """Containers apply_to_collection walks into, each holding ``tensor`` somewhere."""
    return [
        tensor,
        {"a": 1, "b": tensor},
        collections.OrderedDict(a=None, b=[1, (2, tensor)]),
        collections.defaultdict(list, a=[tensor]),
        [1, "x", {"c": tensor}],
        (tensor,),
        Pair(1, tensor),
        _Holder({"v": tensor}),
        {"deep": _Holder(Pair(0, [tensor]))},
    ]


def test_the_walk_finds_what_lightnings_to_moves() -> None:
    """``stays_on`` is false exactly when ``apply_to_collection`` reaches a tensor on another
    device, wherever in the collection it is; a ``Metric`` never stays."""
    for shape in _shapes(torch.ones(2)):
        assert stays_on(shape, CPU) and all(t.device == CPU for t in _reached(shape))
        for target in _reached(shape):
            assert not stays_on(_moved(shape, target), CPU)
    for shape in _shapes(torch.ones(2, device=ELSEWHERE)):
        assert not stays_on(shape, CPU)
    assert not stays_on({"m": MeanMetric()}, CPU)
    # What apply_to_collection leaves alone stays (a tensor in a set is never moved).
    assert stays_on({"s": {1, 2}, "f": len, "sig": None}, CPU)


def test_the_walk_finds_every_tensor_of_a_logged_metric() -> None:
    """On a metric Lightning built: each tensor its ``to`` reaches, put on another device,
    makes the walk say so; a ``to`` another device runs Lightning's, which moves them all."""
    metric = _logged(LeanResultCollection(training=False), [0.5, 1.5])["validation_step.loss"]
    assert type(metric) is LeanResultMetric
    reached = _reached(dict(metric.__dict__))
    assert len(reached) >= 4  # value, cumulated_batch_size, their defaults, caches
    assert stays_on(metric.__dict__, CPU)
    for target in reached:
        assert not stays_on(_moved(dict(metric.__dict__), target), CPU)
    assert metric.to(CPU) is metric and _reached(dict(metric.__dict__))[0] is reached[0]
    assert metric.to(ELSEWHERE) is metric
    assert all(t.device == ELSEWHERE for t in _reached(dict(metric.__dict__)))
    assert stays_on(metric.__dict__, ELSEWHERE)


def _state(metric: _ResultMetric) -> Dict[str, Any]:
    return {
        k: (v.tolist() if isinstance(v, torch.Tensor) else v)
        for k, v in metric.__dict__.items()
        if k not in ("update", "compute", "_update_signature")  # per-instance wrappers
        and not isinstance(v, dict)
    }


def test_the_kept_metrics_equal_lightnings() -> None:
    """The same values logged into Lightning's collection and the lean one: the same metrics,
    metadata, states, computed values and step caches."""
    values = [0.25, 2.0, -1.0, 3.5]
    plain = _logged(_ResultCollection(training=False), values)
    lean = _logged(LeanResultCollection(training=False), values)
    assert list(plain) == list(lean)
    for key in plain:
        assert type(plain[key]) is _ResultMetric and type(lean[key]) is LeanResultMetric
        assert plain[key].meta == lean[key].meta
        assert _state(plain[key]) == _state(lean[key])
        for name in ("_defaults", "_persistent", "_reductions"):
            assert getattr(plain[key], name).keys() == getattr(lean[key], name).keys()
    for on_step in (True, False):
        assert plain.metrics(on_step) == lean.metrics(on_step)
    plain.reset()
    lean.reset()
    assert {k: _state(v) for k, v in plain.items()} == {k: _state(v) for k, v in lean.items()}
    # Other calls (the teardown's cpu()) are Lightning's.
    assert lean.cpu() is lean and all(stays_on(m.__dict__, CPU) for m in lean.values())


def test_a_fit_logs_through_the_lean_metrics(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a fit, the training and validation results are lean and Lightning's ``to`` runs only
    where a metric is new (its first log moves its fresh states); with ``DET_LIGHTNING_LEAN=0``
    everything is Lightning's. tests/integration/test_hooks.py compares the logged metrics."""
    assert lean_results.enabled()
    trainers: List[pl.Trainer] = []
    original = lean_results.install
    monkeypatch.setattr(
        lean_results, "install", lambda trainer: (original(trainer), trainers.append(trainer))
    )
    calls: List[str] = []
    lightning_to = _ResultMetric.to
    monkeypatch.setattr(
        _ResultMetric,
        "to",
        lambda self, *a, **k: (calls.append("to"), lightning_to(self, *a, **k))[1],
    )
    logs: List[str] = []
    original_log = pl.LightningModule.log
    monkeypatch.setattr(
        pl.LightningModule,
        "log",
        lambda self, *a, **k: (logs.append(a[0]), original_log(self, *a, **k))[1],
    )
    for lean_on in ("1", "0"):
        monkeypatch.setenv(versions.LEAN_ENV, lean_on)
        calls.clear()
        logs.clear()
        every_5 = {f"{what}_period": pytorch.Batch(5) for what in ("validation", "reporting")}
        trainer_kwargs = {"checkpoint_dir": str(tmp_path / lean_on)}
        run_trial(pytorch, trainer_kwargs=trainer_kwargs, max_length=pytorch.Batch(20), **every_5)
        epoch_loop = trainers[-1].fit_loop.epoch_loop
        collections_ = (epoch_loop._results, epoch_loop.val_loop._results)
        if lean_on == "1":
            assert all(type(c) is LeanResultCollection for c in collections_)
            assert all(type(m) is LeanResultMetric for c in collections_ for m in c.values())
            # once per metric (its first log) and per teardown cpu(): not per log
            assert len(logs) == 8 and len(calls) < len(logs)
        else:
            assert all(type(c) is _ResultCollection for c in collections_)
            assert len(calls) >= len(logs)
