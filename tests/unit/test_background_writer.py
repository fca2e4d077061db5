"""``BackgroundWriter`` and ``snapshot``: one write at a time, its own error raised where the
training thread waits, and a copy that training can no longer change."""

import threading
from typing import List

import pytest
import torch

from det_lightning.pytorch._background import BackgroundWriter, snapshot


class Boom(Exception):
    pass


def test_the_jobs_error_is_raised_by_wait_once_as_the_same_object() -> None:
    error = Boom("write failed")
    writer = BackgroundWriter()

    def fail() -> None:
        raise error

    writer.submit(fail)
    with pytest.raises(Boom) as raised:
        writer.wait()
    assert raised.value is error
    writer.wait()  # nothing in flight any more: returns
    assert not writer.in_flight()


def test_a_submit_waits_for_the_write_in_flight_and_raises_its_error() -> None:
    release, order = threading.Event(), []
    writer = BackgroundWriter()

    def first() -> None:
        release.wait()
        order.append("first")
        raise Boom("first failed")

    writer.submit(first)
    assert writer.in_flight() and not writer.finished()
    release.set()
    with pytest.raises(Boom, match="first failed"):
        writer.submit(lambda: order.append("second"))
    assert order == ["first"]  # the second never started after the failure


def test_the_writer_thread_is_not_a_daemon() -> None:
    seen: List[bool] = []
    writer = BackgroundWriter()
    writer.submit(lambda: seen.append(threading.current_thread().daemon))
    writer.wait()
    assert seen == [False]  # the interpreter joins it; it never dies mid-write at exit


def test_snapshot_copies_tensors_once_keeping_shared_storage() -> None:
    weight = torch.arange(6.0)
    view = weight[2:]
    state = {"a": weight, "b": view, "same": [weight]}
    copied = snapshot(state)
    weight.add_(100)  # training goes on
    assert torch.equal(copied["a"], torch.arange(6.0))
    assert copied["b"].untyped_storage().data_ptr() == copied["a"].untyped_storage().data_ptr()
    assert copied["same"][0] is copied["a"]
