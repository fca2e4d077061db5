"""Experiment configs are read as the real Determined reads them (YAML 1.2 scalars), so a
hyperparameter written ``lr: 1e-4`` reaches the trial as a float, not the string ``"1e-4"``."""

import pathlib
from typing import Any

import pytest
from determined.common import util as determined_util

from det_lightning._runner.config import load_config
from det_lightning._runner.config._yaml import load_yaml12

SCALARS = [
    "1e-4",
    "5e-4",
    "1.0e-4",
    "1E10",
    "-1e-3",
    "6.8523015e+5",
    "1.",
    ".5",
    "+.5e3",
    "1_000",
    "0x1F",
    "0o17",
    "017",
    "0b101",
    "+1",
    "-0",
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "Yes",
    "ON",
    "true",
    "False",
    "TRUE",
    "tRUE",
    ".inf",
    "-.Inf",
    "1:20",
    "2001-12-14",
    "~",
    "null",
    "NULL",
    "1e-4x",
    "0.1.2",
    "'1e-4'",
    "abc",
]


@pytest.mark.parametrize("scalar", SCALARS)
def test_each_scalar_reads_as_determineds_loader_reads_it(scalar: str) -> None:
    text = f"value: {scalar}\n"
    expected: Any = determined_util.yaml_safe_load(text)["value"]
    got = load_yaml12(text)["value"]
    assert type(got) is type(expected), (scalar, got, expected)
    assert got == expected or (got != got and expected != expected), (scalar, got, expected)


def test_scientific_notation_hyperparameters_reach_the_trial_as_floats(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "const.yaml"
    path.write_text(
        "entrypoint: model_def:Trial\n"
        "hyperparameters:\n"
        "  global_batch_size: 32\n"
        "  lr: 1e-4\n"
        "  weight_decay: 5e-4\n"
        "  flag: yes\n"
        "searcher:\n"
        "  name: single\n"
        "  metric: validation_loss\n"
        "  max_length:\n"
        "    batches: 10\n"
    )
    [hparams] = load_config(path).trial_hparams()
    assert hparams["lr"] == 1e-4 and isinstance(hparams["lr"], float)
    assert hparams["weight_decay"] == 5e-4
    assert hparams["flag"] == "yes"  # a string in YAML 1.2, as Determined passes it on
