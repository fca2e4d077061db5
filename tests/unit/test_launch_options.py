"""Launch options: the command-line helper and the resolution of Lightning's launch options."""

import argparse
import doctest
from typing import Any, Dict

import pytest

from det_lightning import core, pytorch
from det_lightning.pytorch import _launch, _launch_options

TORCHRUN_ENV = {
    "TORCHELASTIC_RUN_ID": "x",
    "LOCAL_WORLD_SIZE": "2",
    "WORLD_SIZE": "4",
    "GROUP_WORLD_SIZE": "2",
    "RANK": "3",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
}


def parse(*argv: str) -> Dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    pytorch.add_launch_arguments(parser)
    return pytorch.launch_kwargs(parser.parse_args(list(argv)))


def test_the_docstring_examples_hold() -> None:
    assert doctest.testmod(_launch).failed == 0
    assert doctest.testmod(_launch_options).failed == 0


def test_options_left_out_keep_lightnings_defaults() -> None:
    assert parse() == {}
    assert parse("--epochs", "3") == {}


def test_every_launch_flag_reaches_init() -> None:
    assert parse(
        "--devices",
        "2",
        "--num-nodes",
        "3",
        "--accelerator",
        "cpu",
        "--strategy",
        "ddp_find_unused_parameters_true",
        "--precision",
        "bf16-mixed",
        "--deterministic",
    ) == {
        "devices": 2,
        "num_nodes": 3,
        "accelerator": "cpu",
        "strategy": "ddp_find_unused_parameters_true",
        "precision": "bf16-mixed",
        "deterministic": True,
    }
    assert parse("--num_nodes", "2") == {"num_nodes": 2}


@pytest.mark.parametrize("text,expected", [("4", 4), ("-1", -1), ("auto", "auto"), ("0,2", "0,2")])
def test_devices_are_read_as_lightning_reads_them(text: str, expected: Any) -> None:
    assert parse("--devices", text) == {"devices": expected}


def test_launch_kwargs_takes_a_namespace_without_the_flags() -> None:
    assert pytorch.launch_kwargs(argparse.Namespace(devices=2)) == {"devices": 2}


def test_torchrun_implies_the_devices_and_nodes_lightning_must_agree_with() -> None:
    assert _launch.resolve_options({"devices": None}, None, TORCHRUN_ENV) == {
        "devices": 2,
        "num_nodes": 2,
    }


def test_given_options_win_over_what_the_environment_implies() -> None:
    resolved = _launch.resolve_options({"devices": 1, "strategy": "ddp"}, None, TORCHRUN_ENV)
    assert resolved == {"devices": 1, "num_nodes": 2, "strategy": "ddp"}


def test_a_users_distributed_context_implies_the_topology() -> None:
    distributed = core.DistributedContext(
        rank=1, size=6, local_rank=1, local_size=3, cross_rank=0, cross_size=2
    )
    assert _launch.resolve_options({}, distributed, {}) == {"devices": 3, "num_nodes": 2}


def test_without_torchrun_nothing_is_implied() -> None:
    assert _launch.resolve_options({"precision": "16-mixed"}, None, {"LOCAL_RANK": "1"}) == {
        "precision": "16-mixed"
    }


def test_unknown_options_are_rejected() -> None:
    with pytest.raises(TypeError, match="Unknown launch options"):
        _launch.resolve_options({"gpus": 2}, None, {})
