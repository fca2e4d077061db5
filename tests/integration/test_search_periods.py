"""A search's periods and what it tells the user: ``min_validation_period`` and
``min_checkpoint_period`` as written beside an ``adaptive_asha`` search's rungs, one TensorBoard
root per search, the warning for a script's own length, and the summary after a signal."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from typing import List

import pytest
import yaml

from det_lightning._config import load_config
from det_lightning._search._runner import lengths_for
from det_lightning._search._settings import SearchSettings
from det_lightning.pytorch import Batch, Epoch
from det_lightning.pytorch._units import unit_reached
from tests.integration.cli_support import (
    PROJECT,
    VALIDATION_LOG_ENV,
    output,
    read_validation_log,
    run_cli,
)

# 64 training records in batches of 8: an epoch is 8 batches. Two trials, rungs at 6 and 12.
ADAPTIVE = """searcher:
  name: adaptive_asha
  metric: validation_loss
  smaller_is_better: true
  max_trials: 2
  max_length:
    batches: 12
  divisor: 2
  mode: aggressive
  max_rungs: 3
min_validation_period:
  epochs: 1
min_checkpoint_period:
  records: 32
"""


def _config(searcher: str = ADAPTIVE) -> str:
    head = (PROJECT / "asha.yaml").read_text().split("searcher:")[0]
    return head + searcher + "reproducibility:\n  experiment_seed: 7\n"


def test_adaptive_trials_get_both_periods_as_written_beside_the_rungs() -> None:
    config = load_config(yaml.safe_load(_config()))
    settings = SearchSettings.from_searcher(config.searcher, 8)
    (bracket,) = settings.brackets
    assert bracket.rung_units == (6, 12)
    lengths = lengths_for(settings, bracket, config, {"global_batch_size": 8})
    assert lengths["max_length"] == Batch(12)
    assert lengths["checkpoint_period"] == Batch(4)  # 32 records of 8
    validation = lengths["validation_period"]
    assert [n for n in range(1, 25) if unit_reached(validation, n, epoch_len=8)] == [
        6, 8, 12, 16, 24]
    epochs = load_config(yaml.safe_load(_config(ADAPTIVE.replace("records: 32", "epochs: 2"))))
    assert lengths_for(settings, bracket, epochs, {})["checkpoint_period"] == Epoch(2)


@pytest.mark.slow
def test_an_adaptive_search_validates_at_every_epoch_and_at_the_rungs(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    config = isolated_run / "adaptive.yaml"
    config.write_text(_config())
    log = isolated_run / "validations.jsonl"
    result = run_cli("experiment", str(config), str(PROJECT), cwd=isolated_run,
                     env={VALIDATION_LOG_ENV: str(log)})
    assert result.returncode == 0, output(result)
    batches: List[List[int]] = [[]]
    for line in read_validation_log(log):  # trials run one after another: 1, then 2
        if batches[-1] and line["batches"] <= batches[-1][-1]:
            batches.append([])
        batches[-1].append(line["batches"])
    # The first trial tops both rungs: rungs 6 and 12, and the epoch's end at 8. The second
    # trains on past 6 (then also validating at 8) or stops there.
    assert batches[0] == [6, 8, 12], output(result)
    assert len(batches) == 2 and batches[1] in ([6], [6, 8, 12]), output(result)
