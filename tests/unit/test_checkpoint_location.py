"""Where checkpoints go: a local path or a URL, settled before anything is written."""

import pathlib

import pytest

from det_lightning import errors
from det_lightning._runner import config as _config
from det_lightning._runner.config._yaml import load_yaml12
from det_lightning._runner.plan import plan_experiment
from det_lightning.pytorch._config_sections import CheckpointStorageConfig
from det_lightning.pytorch._export import export_lightning_checkpoint
from det_lightning.pytorch._local_store import LocalStore
from det_lightning.pytorch._remote import ObjectStore, checkpoint_location
from tests.integration.cli_support import PROJECT


def test_urls_become_object_stores_with_the_configs_endpoint_and_keys() -> None:
    conf = CheckpointStorageConfig(
        type="s3", bucket="b", endpoint_url="http://e:1", access_key="A", secret_key="S"
    )
    root = checkpoint_location("s3://b/run/", conf)
    assert root == ObjectStore(
        "s3://b/run", (("endpoint_url", "http://e:1"), ("key", "A"), ("secret", "S"))
    )
    assert str(root / "trial-3") == "s3://b/run/trial-3"
    assert checkpoint_location("gs://g/p", conf) == ObjectStore("gs://g/p")  # not of its type
    assert checkpoint_location("rel/dir") == LocalStore(pathlib.Path.cwd() / "rel" / "dir")


def test_an_unknown_scheme_or_no_bucket_is_refused() -> None:
    with pytest.raises(errors.CheckpointStorageError, match="ftp://"):
        checkpoint_location("ftp://host/x")
    with pytest.raises(errors.CheckpointStorageError, match="names no bucket"):
        checkpoint_location("s3://")


def test_experiment_checkpoint_dir_and_storage_may_be_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    raw = load_yaml12((PROJECT / "const.yaml").read_text())
    config = _config.load_config(
        {
            **raw,
            "checkpoint_storage": {
                "type": "s3",
                "bucket": "ckpts",
                "prefix": "exp",
                "endpoint_url": "http://e:1",
            },
        }
    )
    plan = plan_experiment(config, PROJECT)
    # The experiment's folder under the bucket's prefix.
    root = ObjectStore(f"s3://ckpts/exp/{plan.experiment_id}", (("endpoint_url", "http://e:1"),))
    assert plan.checkpoint_root == root
    given = plan_experiment(config, PROJECT, checkpoint_dir="s3://other/run")
    assert str(given.checkpoint_root / "trial-1") == f"s3://other/run/{plan.experiment_id}/trial-1"


def test_export_refuses_a_url(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_LIGHTNING_CHECKPOINT_DIR", "s3://b/run")
    (tmp_path / "x.ckpt").write_bytes(b"")
    with pytest.raises(NotImplementedError, match="copy the <uuid> directory"):
        export_lightning_checkpoint(tmp_path / "x.ckpt")
    assert not pathlib.Path("s3:").exists()
