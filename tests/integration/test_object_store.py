"""Checkpoints on an object store, against a real S3 endpoint (moto's server, over HTTP).

The same layout as on disk, one ``<uuid>/`` prefix per checkpoint, visible only once its
``<uuid>/.complete`` marker exists; written locally first, then uploaded; read back through a
local cache. The oracle for resuming is the run that never stopped.
"""

import json
import os
import pathlib
import subprocess
import sys
from typing import Any, Dict

import pytest
import torch

from det_lightning import errors, pytorch
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._remote import MARKER, RemoteRoot
from tests.fixtures.object_store import S3
from tests.integration.cli_support import PROJECT, REPO_ROOT, output, run_cli
from tests.integration.test_preemption import (
    BATCHES,
    MLPTrial,
    assert_same_weights,
    fit,
    stop_at,
)

FILES = {"state_dict.pth", "trial_state.pkl", "load_data.json", "metadata.json", MARKER}


def checkpoints(s3: S3, prefix: str) -> Dict[str, set]:
    """``{uuid: {files}}`` under ``prefix`` (files without ``code/``)."""
    found: Dict[str, set] = {}
    for key in s3.keys(prefix):
        uuid, _, rest = key.partition("/")
        if rest and not rest.startswith("code/"):
            found.setdefault(uuid, set()).add(rest)
    return found


def test_fit_writes_to_s3_and_resumes_on_another_machine_bit_exact(
    s3_server: S3, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, isolated_run: pathlib.Path
) -> None:
    straight = dict(fit(MLPTrial, tmp_path / "straight").model.state_dict())
    url = s3_server.url("run/trial-1")
    stopped = fit(stop_at(4, None), url)  # type: ignore[arg-type]
    assert len(stopped.seen) == 5
    written = checkpoints(s3_server, "run/trial-1")
    assert len(written) == 1 and FILES <= next(iter(written.values()))
    assert any(k.startswith(f"{next(iter(written))}/code/") for k in s3_server.keys("run/trial-1"))
    assert not (isolated_run / "s3:").exists()
    latest = ckpt.latest_checkpoint(RemoteRoot(url))
    assert isinstance(latest, RemoteRoot) and latest.name in written

    # Another machine: an empty cache, the same bucket.
    monkeypatch.setenv("DET_LIGHTNING_CACHE_DIR", str(tmp_path / "machine-b"))
    resumed = fit(MLPTrial, url, latest_checkpoint="latest")  # type: ignore[arg-type]
    assert len(resumed.seen) == BATCHES - 5
    assert_same_weights(dict(resumed.model.state_dict()), straight)
    assert (tmp_path / "machine-b" / "checkpoints").is_dir()  # downloaded there


def test_load_trial_from_checkpoint_url(s3_server: S3, tmp_path: pathlib.Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    trained = fit(MLPTrial, s3_server.url("load"))  # type: ignore[arg-type]
    (uuid,) = checkpoints(s3_server, "load")
    monkeypatch.setenv("DET_LIGHTNING_CACHE_DIR", str(tmp_path / "elsewhere"))
    loaded = pytorch.load_trial_from_checkpoint_path(
        s3_server.url(f"load/{uuid}"), trial_class=MLPTrial
    )
    assert_same_weights(dict(loaded.model.state_dict()), dict(trained.model.state_dict()))
    with pytest.raises(errors.InvalidCheckpointException, match=MARKER):
        pytorch.load_trial_from_checkpoint_path(s3_server.url("load/nothing"), trial_class=MLPTrial)
