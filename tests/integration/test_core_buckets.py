"""The Core API's checkpoints in a bucket, as Determined's ``core.init(checkpoint_storage=
"s3://bucket/prefix")`` or a storage dict stores them: ``<prefix>/<storage_id>/`` with the
loop's files and ``metadata.json``, on a real S3 endpoint (moto's server on loopback). Written
through the trainer's object store: the marker ``<storage_id>/.complete`` last, so a
checkpoint appears whole or not at all; read back through a temporary download."""

import json
import pathlib
from typing import List

import pytest

from det_lightning import core, errors
from det_lightning.core._checkpoint import newest_stored
from tests.fixtures.object_store import S3


def _keys(s3: S3, prefix: str, storage_id: str) -> List[str]:
    return [k.split("/", 1)[1] for k in s3.keys(prefix) if k.startswith(f"{storage_id}/")]


def _leftovers(cache: pathlib.Path) -> List[str]:
    """What the cache holds besides folders: local copies and downloads left behind."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())


def test_store_restore_download_metadata_and_delete_in_a_bucket(
    s3_server: S3, tmp_path: pathlib.Path
) -> None:
    cache = tmp_path / "cache"
    with core.init(checkpoint_storage=s3_server.url("core")) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 5, "note": "x"}) as (path, storage_id):
            (path / "weights.txt").write_text("w=5")
            (path / "sub").mkdir()
            (path / "sub" / "opt.txt").write_text("o=5")
        # Determined's layout, plus the marker (a copy of metadata.json), written last.
        assert _keys(s3_server, "core", storage_id) == [
            ".complete",
            "metadata.json",
            "sub/opt.txt",
            "weights.txt",
        ]
        stored = json.loads(s3_server.fs.cat(f"{s3_server.bucket}/core/{storage_id}/metadata.json"))
        assert stored == {"steps_completed": 5, "note": "x"}
        assert _leftovers(cache) == []  # the local copy went once uploaded

        with ctx.checkpoint.restore_path(storage_id) as restored:
            assert (restored / "weights.txt").read_text() == "w=5"
            assert (restored / "sub" / "opt.txt").read_text() == "o=5"
            assert not (restored / ".complete").exists()
        assert not restored.exists()  # a temporary download, removed after the block
        with ctx.checkpoint.restore_path(storage_id, selector=lambda p: p.startswith("sub/")) as r:
            assert sorted(p.relative_to(r).as_posix() for p in r.rglob("*.txt")) == ["sub/opt.txt"]

        ctx.checkpoint.download(storage_id, tmp_path / "out", selector=lambda p: p != "sub/opt.txt")
        assert sorted(p.name for p in (tmp_path / "out").rglob("*") if p.is_file()) == [
            "metadata.json",
            "weights.txt",
        ]
        assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 5, "note": "x"}

        source = tmp_path / "source"
        source.mkdir()
        (source / "model.txt").write_text("m")
        uploaded = ctx.checkpoint.upload(source, {"steps_completed": 9})
        assert _keys(s3_server, "core", uploaded) == [".complete", "metadata.json", "model.txt"]
        newest = newest_stored(ctx.checkpoint.store)
        assert newest is not None and newest.name == uploaded

        ctx.checkpoint.delete(storage_id)
        assert _keys(s3_server, "core", storage_id) == []
        with pytest.raises(errors.CheckpointNotFound, match=storage_id):
            ctx.checkpoint.get_metadata(storage_id)
        with pytest.raises(errors.CheckpointNotFound):
            with ctx.checkpoint.restore_path("no-such-checkpoint"):
                pass
    assert [p for p in _leftovers(cache) if "downloading" in p] == []


def test_a_failed_store_path_block_leaves_nothing_in_the_bucket(
    s3_server: S3, tmp_path: pathlib.Path
) -> None:
    with core.init(checkpoint_storage=s3_server.url("core")) as ctx:
        with pytest.raises(RuntimeError, match="killed mid-write"):
            with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
                (path / "weights.txt").write_text("partial")
                raise RuntimeError("killed mid-write")
        assert newest_stored(ctx.checkpoint.store) is None
    assert s3_server.keys("core") == []
    assert _leftovers(tmp_path / "cache") == []


def test_a_storage_dict_uses_its_own_endpoint_and_keys(
    s3_server: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Determined's experiment-config shape. boto's environment is emptied: the dict's
    endpoint and keys are the only way to the server."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    storage = {
        "type": "s3",
        "bucket": s3_server.bucket,
        "prefix": "from-dict",
        "endpoint_url": s3_server.endpoint,
        "access_key": "testing",
        "secret_key": "testing",
    }
    with core.init(checkpoint_storage=storage) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 2}) as (path, storage_id):
            (path / "weights.txt").write_text("w=2")
        # What a search gives a resumed trial: the checkpoint's URL, not only its id.
        with ctx.checkpoint.restore_path(f"{s3_server.url('from-dict')}/{storage_id}") as path:
            assert (path / "weights.txt").read_text() == "w=2"
    assert _keys(s3_server, "from-dict", storage_id) == [
        ".complete",
        "metadata.json",
        "weights.txt",
    ]


def test_a_refused_upload_raises_naming_the_bucket_and_leaves_no_checkpoint(
    s3_server: S3, tmp_path: pathlib.Path
) -> None:
    with core.init(checkpoint_storage=s3_server.url("core")) as ctx:
        with s3_server.refusing("PUT", "/weights.txt") as refused:
            with pytest.raises(errors.CheckpointStorageError, match="Uploading checkpoint"):
                with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
                    (path / "weights.txt").write_text("w=1")
        assert refused, "the server refused nothing"
        assert newest_stored(ctx.checkpoint.store) is None  # no marker: never listed
        assert ".complete" not in _keys(s3_server, "core", storage_id)
    assert _leftovers(tmp_path / "cache") == []  # nor a local copy left in the cache


def test_bookkeeping_over_a_bucket_it_cannot_list_names_it_and_the_credentials(
    s3_server: S3, capsys: pytest.CaptureFixture
) -> None:
    from det_lightning._runner import cli

    with s3_server.refusing("GET", f"/{s3_server.bucket}") as refused:
        assert cli.main(["experiment", "list", "--checkpoint-dir", s3_server.url("team")]) == 1
    err = capsys.readouterr().err
    assert refused, "the server refused nothing"
    assert err.startswith(
        f"det-lightning experiment list: error: Cannot list {s3_server.url('team')}"
    )
    assert f"Endpoint: {s3_server.endpoint}" in err and "Traceback" not in err
