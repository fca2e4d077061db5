"""The MNIST example, launched on two CPU processes by Lightning from its command line."""

import re

import pytest

from tests.distributed import jobs

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_mnist_example_trains_on_two_processes(tmp_path_factory: pytest.TempPathFactory) -> None:
    script = jobs.REPO / "examples" / "mnist" / "train.py"
    workdir = tmp_path_factory.mktemp("mnist")
    job = jobs.run([str(script), "--devices", "2", "--accelerator", "cpu"], workdir, timeout=400)
    assert job.returncode == 0, job.output[-6000:]
    assert "terminate called" not in job.output, job.output[-6000:]  # no rank aborted at exit
    assert "Starting with 2 processes" in job.output
    # One epoch of 4096 images at a global batch of 64: 64 batches, of 32 images per process.
    validations = re.findall(
        r"report_validation_metrics\(steps_completed=(\d+), metrics=\{[^}]*'accuracy': "
        r"([0-9.]+)",  # a plain number, not numpy's repr
        job.output,
    )
    assert validations and validations[-1][0] == "64", job.output[-3000:]
    assert float(validations[-1][1]) > 0.5
    # The example seeds nothing, so either validation (32, 64) may be the better one. The
    # default retention keeps the best and the latest: one checkpoint when 64 validated
    # better, else the best (32) and the latest (64).
    losses = [
        float(v)
        for v in re.findall(
            r"report_validation_metrics\(steps_completed=\d+, metrics=\{[^}]*'validation_loss': "
            r"([0-9.e+-]+)",
            job.output,
        )
    ]
    assert len(losses) == 2, job.output[-3000:]
    # (the log rounds the losses: two that print alike may be either way round)
    kept = {1} if losses[1] < losses[0] else {2} if losses[1] > losses[0] else {1, 2}
    assert len(job.checkpoints()) in kept, (losses, job.checkpoints())
