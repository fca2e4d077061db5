"""``torch_batch_process`` as Determined's example runs it: an experiment whose trial is
``python3 -m determined.launch.torch_distributed python3 batch_inference.py`` on two slots
(``tests/distributed/scripts/batch_inference.py``), stopped by SIGTERM mid-shard and rerun.

Every item is processed once across both runs, each rank's batches in Determined's order
(its own ``DataLoader.get_data_loader(num_replicas=2, rank=r)``), the outputs of both runs
land in one folder, and the metric at the end covers every batch."""

import json
import os
import pathlib
import re
import shutil
import signal
import sys
import time
from typing import Dict, List

import pytest

from tests.integration.cli_support import output, run_cli, signal_when

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.interop]

SCRIPT = pathlib.Path(__file__).parent / "scripts" / "batch_inference.py"
CONFIG = """
name: batch-inference
entrypoint: >-
  python3 -m determined.launch.torch_distributed
  python3 batch_inference.py
resources:
  slots_per_trial: 2
hyperparameters:
  model: linear
searcher:
  name: single
  metric: total
  smaller_is_better: false
max_restarts: 0
"""
COMMAND = ["experiment", "--accelerator", "cpu", "--checkpoint-dir", "ckpt", "config.yaml", "."]


def _events(model_dir: pathlib.Path, rank: int) -> List[list]:
    path = model_dir / f"events-rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _determined_shards() -> Dict[int, List[List[int]]]:
    """Each rank's batches as Determined 0.38.1's sharding gives them."""
    import torch
    from determined import pytorch as real

    items = [torch.tensor([i]) for i in range(40)]
    shards = {}
    for rank in (0, 1):
        loader = real.DataLoader(items, batch_size=2, shuffle=False)
        batches = loader.get_data_loader(repeat=False, num_replicas=2, rank=rank)
        shards[rank] = [b[:, 0].tolist() for b in batches]
    return shards


def test_a_batch_job_stopped_by_sigterm_resumes_where_it_stopped(tmp_path: pathlib.Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(SCRIPT, model_dir / SCRIPT.name)
    (model_dir / "config.yaml").write_text(CONFIG)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HOLD_AT": "3"}

    def release_once_both_ranks_got_it() -> None:
        """torchrun forwards the signal to its ranks: a release before they have it lets them
        train past the next checkpoint (seen under load: batches 4 and 5)."""
        deadline = time.monotonic() + 300
        while (model_dir / "stderr.txt").read_text().count("SIGTERM received") < 2:
            assert time.monotonic() < deadline, "the ranks never got the SIGTERM"
            time.sleep(0.05)
        (model_dir / "release").touch()

    status, out, err = signal_when(
        [sys.executable, "-m", "det_lightning", *COMMAND],
        model_dir,
        env,
        lambda _: all((model_dir / f"held-rank{r}").exists() for r in (0, 1)),
        signal.SIGTERM,
        then=release_once_both_ranks_got_it,
    )
    shown = f"{out}\n{err}"
    assert status == 75, shown
    # Both ranks finished batch 3 and stopped at the checkpoint after it (4 batches each).
    for rank in (0, 1):
        assert [e[0] for e in _events(model_dir, rank)] == [0, 1, 2, 3], shown

    result = run_cli(*COMMAND, cwd=model_dir, env={**env, "HOLD_AT": ""})
    assert result.returncode == 0, output(result)
    shards = _determined_shards()
    for rank in (0, 1):
        events = _events(model_dir, rank)
        assert [e[0] for e in events] == list(range(10)), output(result)
        assert [e[1] for e in events] == shards[rank], output(result)
    processed = sorted(i for r in (0, 1) for e in _events(model_dir, r) for i in e[1])
    assert processed == list(range(40))

    # One checkpoint every 2 batches, all naming the one outputs folder both runs wrote.
    (experiment,) = [p for p in (model_dir / "ckpt").iterdir() if p.is_dir()]
    trial = experiment / "trial-1"
    metadata = [json.loads(p.read_text()) for p in trial.glob("*/metadata.json")]
    assert sorted(m["steps_completed"] for m in metadata) == [2, 4, 6, 8, 10]
    (outputs,) = {m["default_output_uuid"] for m in metadata}
    for rank in (0, 1):
        written = sorted((trial / outputs / f"rank_{rank}").iterdir())
        assert [p.name for p in written] == sorted(f"b{i}.json" for i in range(10))
        assert (
            json.loads((trial / outputs / f"rank_{rank}" / "b9.json").read_text())
            == (shards[rank][9])
        )
    # The metric at the end covers both runs' batches: 0 + 1 + ... + 39.
    assert re.search(r"^1\s+COMPLETED\s.*\b780\b", result.stdout, re.M), output(result)
