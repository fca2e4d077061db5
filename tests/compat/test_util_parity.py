"""``det_lightning.util`` and ``pytorch.adapt_batch_sampler`` against Determined 0.38.1's."""

import logging
import random
import sys
import warnings
from typing import Any, List

import numpy as np
import pytest
from determined import errors as det_errors
from determined import pytorch as det_pytorch
from determined import util as det_util
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from det_lightning import errors, util
from det_lightning import pytorch as dl_pytorch

pytestmark = pytest.mark.interop

with warnings.catch_warnings():  # google.api_core warns about this Python's end of life
    warnings.simplefilter("ignore", FutureWarning)
    warnings.simplefilter("ignore", ImportWarning)  # and about grpcio-status
    from google.cloud import storage


class FlakyBlob(storage.Blob):
    """A real ``storage.Blob`` whose download fails ``failures`` times, then returns bytes."""

    def __init__(self, failures: int) -> None:
        super().__init__("data/train.bin", bucket=storage.Bucket(None, "bucket"))
        self.failures, self.calls = failures, 0

    def download_as_string(self, *args: Any, **kwargs: Any) -> bytes:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("flaky network")
        return b"payload"


@pytest.mark.parametrize("api", [det_util, util], ids=["determined", "det_lightning"])
def test_gcs_download_retries_and_leaves_random_where_it_was(api: Any) -> None:
    random.seed(5)
    expected_next = random.Random(5).random()
    blob = FlakyBlob(failures=2)
    assert api.download_gcs_blob_with_backoff(blob, n_retries=4, max_backoff=0) == b"payload"
    assert blob.calls == 3
    assert random.random() == expected_next  # the jitter's draws were put back


def test_gcs_download_gives_up_like_determined() -> None:
    with pytest.raises(Exception, match="Max retries exceeded"):
        det_util.download_gcs_blob_with_backoff(FlakyBlob(5), n_retries=2, max_backoff=0)
    with pytest.raises(RuntimeError, match="Max retries exceeded"):
        util.download_gcs_blob_with_backoff(FlakyBlob(5), n_retries=2, max_backoff=0)
    with pytest.raises(TypeError, match="google.cloud.storage.Blob"):
        util.download_gcs_blob_with_backoff(b"not a blob")


def test_gcs_download_without_the_package_names_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match="pip install google-cloud-storage"):
        util.download_gcs_blob_with_backoff(object())


def _parent_child() -> Any:
    class Parent:
        def hook(self) -> None:
            pass

    class Child(Parent):
        def hook(self) -> None:
            pass

    return Parent, Child


@pytest.mark.parametrize(
    "call",
    [
        lambda u: u.humanize_float(1.33333333),
        lambda u: u.humanize_float(3333.3333),
        lambda u: u.humanize_float(-0.000123456789),
        lambda u: u.humanize_float(float("inf")),
        lambda u: u.merge_dicts({"a": {"x": 1, "y": [2]}, "b": 1}, {"a": {"y": 3}, "c": {"d": 4}}),
        lambda u: sorted(u.filter_duplicates([3, 1, 3, 2, 1, 1])),
        lambda u: [
            u.is_numerical_scalar(v)
            for v in (1, 2.5, np.float32(2), np.array(3), np.zeros(2), "4", None, np.array("x"))
        ],
        lambda u: [
            u.has_param(lambda a, b=1: None, "b"),
            u.has_param(lambda a: None, "z", 0),
            u.has_param(lambda a: None, "z", 1),
        ],
        lambda u: [
            u.is_overridden(_parent_child()[1]().hook, _parent_child()[0]),
            u.is_overridden(_parent_child()[0]().hook, _parent_child()[0]),
            u.is_overridden(3, _parent_child()[0]),
        ],
        lambda u: (
            u.get_member_func([], "append") is not None and u.get_member_func([], "x") is None
        ),
        lambda u: u.calculate_batch_sizes({"global_batch_size": 10}, 3, "PyTorchTrial"),
        lambda u: u.calculate_batch_sizes({"global_batch_size": 8}, 0, "PyTorchTrial"),
    ],
    ids=lambda _: "",
)
def test_helpers_answer_as_determineds_do(call: Any) -> None:
    assert call(util) == call(det_util)


@pytest.mark.parametrize(
    "hparams,slots", [({}, 1), ({"global_batch_size": 2.0}, 1), ({"global_batch_size": 2}, 4)]
)
def test_batch_size_errors_match(hparams: dict, slots: int) -> None:
    with pytest.raises(det_errors.InvalidExperimentException) as theirs:
        det_util.calculate_batch_sizes(hparams, slots, "PyTorchTrial")
    with pytest.raises(errors.InvalidExperimentException) as ours:
        util.calculate_batch_sizes(hparams, slots, "PyTorchTrial")
    assert str(ours.value) == str(theirs.value)


def test_uneven_batch_size_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        util.calculate_batch_sizes({"global_batch_size": 10}, 3, "PyTorchTrial")
    assert "effective global batch size of 9" in caplog.text


def _batches(api: Any, **kwargs: Any) -> List[List[int]]:
    import itertools

    import torch

    torch.manual_seed(0)
    base = BatchSampler(RandomSampler(range(10)), 3, drop_last=False)
    return list(itertools.islice(api.adapt_batch_sampler(base, **kwargs), 12))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"repeat": True},
        {"skip": 2},
        {"num_replicas": 2, "rank": 1},
        {"repeat": True, "skip": 3, "num_replicas": 3, "rank": 2},
    ],
)
def test_adapt_batch_sampler_yields_determineds_batches(kwargs: dict) -> None:
    assert _batches(dl_pytorch, **kwargs) == _batches(det_pytorch, **kwargs)


def test_forward_signals_restores_handlers() -> None:
    import signal
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    before = signal.getsignal(signal.SIGUSR1)
    try:
        with util.forward_signals(child, signal.SIGUSR1):
            assert signal.getsignal(signal.SIGUSR1) is not before
            signal.raise_signal(signal.SIGUSR1)  # forwarded: the child dies of it
            assert child.wait(timeout=60) == -signal.SIGUSR1
        assert signal.getsignal(signal.SIGUSR1) is before
    finally:
        child.kill()
        child.wait()
    with pytest.raises(errors.NotProvidedError, match="killpg"):
        with util.forward_signals(child, signal_children=True):
            pass


def test_sequential_sampler_is_unchanged() -> None:
    base = BatchSampler(SequentialSampler(range(5)), 2, drop_last=False)
    assert list(dl_pytorch.adapt_batch_sampler(base)) == [[0, 1], [2, 3], [4]]
