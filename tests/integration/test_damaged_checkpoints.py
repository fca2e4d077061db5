"""``latest`` in a bucket: a checkpoint with its marker whose files were deleted since is
named in a warning and never resumed from; the newest complete one is."""

import pathlib

import pytest

from det_lightning.adapters.resume import plan_resume
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._remote import ObjectStore
from tests.fixtures.object_store import S3
from tests.unit.test_resume_plan import RUN, UUIDS, _ours


def test_latest_in_a_bucket_names_a_damaged_checkpoint_and_resumes_the_one_before(
    s3_server: S3, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = ObjectStore(s3_server.url("damaged"))
    for uuid, batches in zip(UUIDS, (3, 6)):
        root.publish(uuid, _ours(tmp_path / "written", uuid, batches))
    newest = root.child(UUIDS[1])
    s3_server.fs.rm_file(f"{newest.key}/{ckpt.METADATA_FILE}")  # deleted from the bucket
    assert [c.name for c in root.complete()] == [UUIDS[0]]
    plan = plan_resume("latest", root, RUN)
    assert plan.first_batch == 3 and plan.name == str(root / UUIDS[0])
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert f"{newest} (no {ckpt.METADATA_FILE})" in warning.message, warning.message
    assert f"{UUIDS[1]}/{ckpt.STATE_DICT_FILE}" in s3_server.keys("damaged")  # kept
