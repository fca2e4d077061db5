"""Checkpoints on an object store, against a real S3 endpoint (moto's server, over HTTP).

The same layout as on disk, one ``<uuid>/`` prefix per checkpoint, visible only once its
``<uuid>/.complete`` marker exists; written locally first, then uploaded; read back through a
local cache. The oracle for resuming is the run that never stopped.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any, Dict, List, Set

import pytest
import torch

from det_lightning import errors, pytorch
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._config_sections import CheckpointStorageConfig
from det_lightning.pytorch._remote import MARKER, ObjectStore
from det_lightning.pytorch._retention import VALIDATION_KEY, retain_experiment_best
from tests.fixtures.object_store import S3
from tests.integration.cli_support import PROJECT, REPO_ROOT, experiment_dir, output, run_cli
from tests.integration.test_checkpoints import ScriptedMetricTrial
from tests.integration.test_checkpoints import fit as fit_checkpoints
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


def metadata(s3: S3, prefix: str) -> Dict[str, Dict[str, Any]]:
    """``{uuid: metadata.json}`` of the checkpoints under ``prefix`` that have one."""
    return {
        uuid: json.loads(s3.fs.cat_file(f"{s3.bucket}/{prefix}/{uuid}/metadata.json"))
        for uuid, files in checkpoints(s3, prefix).items()
        if "metadata.json" in files
    }


def described(s3: S3, prefix: str, result: subprocess.CompletedProcess) -> str:
    """A failed assertion's story: the checkpoints under ``prefix`` with their files and
    metadata.json, and the CLI's whole output."""
    found, metadatas = checkpoints(s3, prefix), metadata(s3, prefix)
    lines = [f"{uuid}: {sorted(files)} {metadatas.get(uuid)}" for uuid, files in found.items()]
    return "\n".join([f"checkpoints under {prefix}:", *lines, output(result)])


def best_and_latest(s3: S3, prefix: str) -> Set[str]:
    """What ``save_trial_best: 1`` and ``save_trial_latest: 1`` keep of the checkpoints under
    ``prefix`` (smaller validation_loss is better): the newest and the best validated one."""
    metadatas = metadata(s3, prefix)
    newest = max(metadatas, key=lambda uuid: metadatas[uuid]["steps_completed"])
    validated = {
        uuid: m[VALIDATION_KEY]["value"] for uuid, m in metadatas.items() if m.get(VALIDATION_KEY)
    }
    return {newest, *([min(validated, key=validated.__getitem__)] if validated else [])}


def test_fit_writes_to_s3_and_resumes_on_another_machine_bit_exact(
    s3_server: S3,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated_run: pathlib.Path,
) -> None:
    straight = dict(fit(MLPTrial, tmp_path / "straight").model.state_dict())
    url = s3_server.url("run/trial-1")
    stopped = fit(stop_at(4, None), url)  # type: ignore[arg-type]
    assert len(stopped.seen) == 5
    written = checkpoints(s3_server, "run/trial-1")
    assert len(written) == 1 and FILES <= next(iter(written.values()))
    assert any(k.startswith(f"{next(iter(written))}/code/") for k in s3_server.keys("run/trial-1"))
    assert not (isolated_run / "s3:").exists()
    latest = ObjectStore(url).latest()
    assert isinstance(latest, ObjectStore) and latest.name in written

    # Another machine: an empty cache, the same bucket.
    monkeypatch.setenv("DET_LIGHTNING_CACHE_DIR", str(tmp_path / "machine-b"))
    resumed = fit(MLPTrial, url, latest_checkpoint="latest")  # type: ignore[arg-type]
    assert len(resumed.seen) == BATCHES - 5
    assert_same_weights(dict(resumed.model.state_dict()), straight)
    assert (tmp_path / "machine-b" / "checkpoints").is_dir()  # downloaded there


def test_load_trial_from_checkpoint_url(
    s3_server: S3, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trained = fit(MLPTrial, s3_server.url("load"))  # type: ignore[arg-type]
    (uuid,) = checkpoints(s3_server, "load")
    monkeypatch.setenv("DET_LIGHTNING_CACHE_DIR", str(tmp_path / "elsewhere"))
    loaded = pytorch.load_trial_from_checkpoint_path(
        s3_server.url(f"load/{uuid}"), trial_class=MLPTrial
    )
    assert_same_weights(
        dict(loaded.model.state_dict()),  # type: ignore[attr-defined]
        dict(trained.model.state_dict()),
    )
    with pytest.raises(errors.InvalidCheckpointException, match=MARKER):
        pytorch.load_trial_from_checkpoint_path(s3_server.url("load/nothing"), trial_class=MLPTrial)


def test_retention_deletes_in_the_bucket(s3_server: S3, tmp_path: pathlib.Path) -> None:
    url = s3_server.url("kept")
    conf = {"checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 0}}
    with pytorch.init(
        hparams={"n": 48, "batch_size": 8}, exp_conf=conf, accelerator="cpu"
    ) as context:
        trainer = pytorch.Trainer(MLPTrial(context), context, logger=False, checkpoint_dir=url)
        trainer.fit(
            max_length=pytorch.Batch(8), checkpoint_period=pytorch.Batch(2), checkpoint_policy="all"
        )
    assert trainer.result is not None
    left = checkpoints(s3_server, "kept")
    assert list(left) == [trainer.result.latest_checkpoint]  # three others: every object gone
    staged = [p.name for p in ObjectStore(url).staging().iterdir()]
    assert staged == [trainer.result.latest_checkpoint]  # and their local copies


@pytest.mark.parametrize(
    "scores,kept",
    [
        ([2.0, 1.0], [6]),  # the final validation is the best: the one at batch 4 goes
        ([1.0, 2.0], [4, 6]),  # it is worse: the best (batch 4) and the latest (batch 6) stay
    ],
)
def test_best_and_latest_stay_in_the_bucket(
    s3_server: S3, tmp_path: pathlib.Path, scores: List[float], kept: List[int]
) -> None:
    """checkpoint_policy='best' with the default save_trial_best=1, save_trial_latest=1, as the
    command entrypoint of the experiment test below runs: whether one or two checkpoints stay
    depends on the validations, in the run and in the experiment's retention after it."""
    url = s3_server.url("best/trial-1")
    exp_conf = {"searcher": {"metric": "score", "smaller_is_better": True}}
    fit_checkpoints(
        ScriptedMetricTrial,
        {"lr": 0.1, "scores": scores},
        exp_conf=exp_conf,
        trainer_kwargs={"logger": False, "checkpoint_dir": url},
        max_length=pytorch.Batch(6),
        validation_period=pytorch.Batch(4),
        checkpoint_policy="best",
    )
    metadatas = metadata(s3_server, "best/trial-1")
    assert sorted(m["steps_completed"] for m in metadatas.values()) == kept
    assert set(metadatas) == best_and_latest(s3_server, "best/trial-1")
    defaults = CheckpointStorageConfig()  # save_trial_best=1, save_trial_latest=1
    deleted = retain_experiment_best(
        [ObjectStore(url)], defaults, metric="score", smaller_is_better=True
    )
    assert deleted == []
    assert metadata(s3_server, "best/trial-1") == metadatas


def test_an_unmarked_prefix_is_invisible_and_swept_when_a_run_starts(
    s3_server: S3, tmp_path: pathlib.Path
) -> None:
    url = s3_server.url("killed")
    fit(stop_at(2, None), url)  # type: ignore[arg-type]
    (good,) = checkpoints(s3_server, "killed")
    # A kill mid-upload: a newer checkpoint's files without its marker.
    fs, base = s3_server.fs, f"{s3_server.bucket}/killed"
    half = "0b7c8a3e-1111-4222-8333-944445555666"
    fs.copy(f"{base}/{good}/state_dict.pth", f"{base}/{half}/state_dict.pth")
    fs.pipe_file(f"{base}/{half}/metadata.json", json.dumps({"steps_completed": 99}).encode())
    fs.pipe_file(f"{base}/notes/keep.txt", b"not a checkpoint")  # not ours to sweep
    root = ObjectStore(url)
    latest = root.latest()
    assert latest is not None and latest.name == good
    with pytest.raises(errors.InvalidCheckpointException, match=MARKER):
        root.fetch(half)

    resumed = fit(MLPTrial, url, latest_checkpoint="latest")  # type: ignore[arg-type]
    assert len(resumed.seen) == BATCHES - 3  # from the marked checkpoint, not the unmarked one
    assert half not in checkpoints(s3_server, "killed")
    assert "notes/keep.txt" in s3_server.keys("killed")


def test_a_checkpoints_files_move_at_once_and_a_refused_upload_publishes_nothing(
    s3_server: S3, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's code/ holds a file per source file: they are uploaded, and downloaded,
    several at once. The server refusing one upload stops the run with the upload's error;
    that checkpoint never gets its marker, and the one before it stays whole."""
    url = s3_server.url("many")
    trained = fit(MLPTrial, url)  # type: ignore[arg-type]
    (uuid,) = checkpoints(s3_server, "many")
    assert len(s3_server.keys(f"many/{uuid}/code")) > 20  # the tests package's files
    assert s3_server.switch.peak["PUT"] > 1, s3_server.switch.peak
    monkeypatch.setenv("DET_LIGHTNING_CACHE_DIR", str(tmp_path / "elsewhere"))
    loaded = pytorch.load_trial_from_checkpoint_path(f"{url}/{uuid}", trial_class=MLPTrial)
    assert s3_server.switch.peak["GET"] > 1, s3_server.switch.peak
    assert_same_weights(
        dict(loaded.model.state_dict()),  # type: ignore[attr-defined]
        dict(trained.model.state_dict()),
    )
    with s3_server.refusing("PUT", "/tests/__init__.py") as refused:
        with pytest.raises(errors.CheckpointStorageError, match="Uploading checkpoint"):
            fit(MLPTrial, s3_server.url("refused"))  # type: ignore[arg-type]
    assert refused, "the server refused no upload"
    assert not [k for k in s3_server.keys("refused") if k.endswith(MARKER)]  # never published
    assert [k for k in s3_server.keys("many") if k.endswith(MARKER)] == [f"{uuid}/{MARKER}"]


def test_a_missing_bucket_fails_before_training_and_writes_nothing_locally(
    s3_server: S3, tmp_path: pathlib.Path, isolated_run: pathlib.Path
) -> None:
    trial_cls = stop_at(100, None)
    with pytest.raises(errors.CheckpointStorageError) as failure:
        fit(trial_cls, "s3://no-such-bucket-here/run")  # type: ignore[arg-type]
    message = str(failure.value)
    assert "'no-such-bucket-here' does not exist" in message
    assert "AWS_ACCESS_KEY_ID" in message and s3_server.endpoint in message
    assert not (isolated_run / "s3:").exists() and not (tmp_path / "cache").exists()


def test_an_unreachable_endpoint_names_it_and_the_credentials(
    s3_server: S3,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated_run: pathlib.Path,
) -> None:
    closed = "http://127.0.0.1:9"  # discard: nothing listens
    conf = {
        "checkpoint_storage": {
            "type": "s3",
            "bucket": s3_server.bucket,
            "endpoint_url": closed,
            "access_key": "AKIAEXAMPLE",
            "secret_key": "wrong",
        }
    }
    with pytorch.init(
        hparams={"n": 48, "batch_size": 8}, exp_conf=conf, accelerator="cpu"
    ) as context:
        trial = MLPTrial(context)
        trainer = pytorch.Trainer(trial, context, logger=False, checkpoint_dir=s3_server.url("x"))
        with pytest.raises(errors.CheckpointStorageError) as failure:
            trainer.fit(max_length=pytorch.Batch(2))
    message = str(failure.value)
    assert closed in message and "checkpoint_storage's access_key/secret_key" in message
    assert "wrong" not in message  # no secrets in errors
    assert trial.seen == [] and not (isolated_run / "s3:").exists()


_WITHOUT_S3FS = """
import sys
sys.modules["s3fs"] = None  # as if the s3 extra were not installed
from det_lightning import errors, pytorch
from tests.fixtures.trials import make_trials
trial_cls = make_trials(pytorch)["MLPTrial"]
with pytorch.init(hparams={"n": 48, "batch_size": 8}, accelerator="cpu") as context:
    trial = trial_cls(context)
    trainer = pytorch.Trainer(trial, context, logger=False, checkpoint_dir="s3://bucket/run")
    try:
        trainer.fit(max_length=pytorch.Batch(2))
    except errors.CheckpointStorageError as e:
        print("ERROR:", e, "| batches:", len(trial.seen))
"""


def test_without_the_extra_the_error_names_the_install_command(
    tmp_path: pathlib.Path, isolated_run: pathlib.Path
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "OMP_NUM_THREADS": "1",
        "DET_LIGHTNING_CACHE_DIR": str(tmp_path / "cache"),
    }
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_S3FS],
        cwd=isolated_run,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "ERROR:" in result.stdout, result.stdout + result.stderr
    assert "pip install 'det_lightning[s3]'" in result.stdout
    assert "| batches: 0" in result.stdout
    assert not (isolated_run / "s3:").exists() and not (tmp_path / "cache").exists()


def test_experiment_with_s3_checkpoint_storage_writes_to_the_bucket(
    s3_server: S3,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    isolated_run: pathlib.Path,
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")  # the config's endpoint_url must be used
    config = (PROJECT / "const.yaml").read_text() + (
        f"checkpoint_storage:\n  type: s3\n  bucket: {s3_server.bucket}\n  prefix: exp/a\n"
        f"  endpoint_url: {s3_server.endpoint}\n  save_trial_latest: 1\n  save_trial_best: 0\n"
    )
    (tmp_path / "s3.yaml").write_text(config)
    result = run_cli("experiment", str(tmp_path / "s3.yaml"), str(PROJECT), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    a = experiment_dir(pathlib.Path("exp/a"), tmp_path / "s3.yaml").as_posix()  # its folder
    written = checkpoints(s3_server, f"{a}/trial-1")
    assert len(written) == 1 and FILES <= next(iter(written.values())), described(
        s3_server, f"{a}/trial-1", result
    )
    assert f"checkpoints under s3://{s3_server.bucket}/{a}\n" in result.stdout
    assert f"checkpoint trial-1/{next(iter(written))}\n" in result.stdout
    assert f"{a}/experiment.json" in s3_server.keys()
    assert not (isolated_run / "s3:").exists() and not (tmp_path / "checkpoints").exists()
    # A command entrypoint's child process gets the config's endpoint too.
    script = (PROJECT / "script.yaml").read_text() + (
        f"checkpoint_storage:\n  type: s3\n  bucket: {s3_server.bucket}\n  prefix: exp/b\n"
        f"  endpoint_url: {s3_server.endpoint}\n"
    )
    (tmp_path / "script-s3.yaml").write_text(script)
    result = run_cli("experiment", str(tmp_path / "script-s3.yaml"), str(PROJECT), cwd=isolated_run)
    assert result.returncode == 0, output(result)
    # The script trains unseeded (Determined's local mode): in 3 runs of 400 its final
    # validation is worse than the one at batch 4, and then both checkpoints stay (retention
    # keeps the best and the latest; test_best_and_latest_stay_in_the_bucket pins both cases).
    b = experiment_dir(pathlib.Path("exp/b"), tmp_path / "script-s3.yaml").as_posix()
    kept = checkpoints(s3_server, f"{b}/trial-1")
    story = described(s3_server, f"{b}/trial-1", result)
    assert set(kept) == best_and_latest(s3_server, f"{b}/trial-1"), story
    assert all(FILES <= files for files in kept.values()), story
    saved = re.findall(r"saved checkpoint (\S+) at", result.stderr)
    deleted = re.findall(r"deleted checkpoint (\S+) ", result.stderr)
    assert set(saved) - set(kept) == set(deleted), story
    state = torch.load(
        str(
            ObjectStore(
                s3_server.url(f"{a}/trial-1/{next(iter(written))}"),
                (("endpoint_url", s3_server.endpoint),),
            ).local_copy()
            / "state_dict.pth"
        ),
        weights_only=True,
    )
    assert ckpt.MODELS in state
