"""``torch_batch_process`` with its checkpoints in a bucket (moto's S3 server): the outputs go
under ``<prefix>/<output uuid>/rank_0/`` (marked, so a sweep of killed uploads keeps them), the
checkpoints are published with their marker, and a job resumed from one of them downloads it
and writes on into the same outputs prefix."""

import json
from typing import Any, List

import pytest
import torch

from det_lightning import core
from det_lightning._info import ClusterInfo, TrialInfo
from det_lightning.pytorch.experimental import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
    torch_batch_process,
)
from det_lightning.pytorch.experimental import _torch_batch_process as module
from tests.fixtures.batch_metrics import record_reports
from tests.fixtures.object_store import S3


class Items(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 9

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(i)


class Upload(TorchBatchProcessor):
    seen: List[int] = []

    def __init__(self, context: TorchBatchProcessorContext) -> None:
        self.context = context
        self.total = context.wrap_reducer(lambda values: sum(values), name="total")

    def process_batch(self, batch: Any, batch_idx: int) -> None:
        Upload.seen.append(batch_idx)
        self.total.update(int(batch.sum()))
        with self.context.upload_path() as path:
            (path / f"{batch_idx}.json").write_text(json.dumps(batch.tolist()))


def test_a_job_in_a_bucket_checkpoints_uploads_and_resumes(
    isolated_run: Any, s3_server: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = s3_server.url("batch")
    monkeypatch.setenv("DET_LIGHTNING_CHECKPOINT_DIR", url)
    reported = record_reports(monkeypatch)
    Upload.seen = []
    torch_batch_process(Upload, Items(), batch_size=2, checkpoint_interval=2, max_batches=4)
    assert Upload.seen == [0, 1, 2, 3] and reported == [(4, {"total": 28})]
    with core.init(checkpoint_storage=url) as ctx:
        published = sorted(
            ctx.checkpoint.store.published(), key=lambda e: e.metadata["steps_completed"]
        )
    assert [e.metadata["steps_completed"] for e in published] == [2, 4]
    outputs = published[0].metadata["default_output_uuid"]
    keys = s3_server.keys(f"batch/{outputs}")
    assert keys == [".outputs", *(f"rank_0/{i}.json" for i in range(4))]
    assert ctx.checkpoint.store.sweep() == []  # the outputs are not a killed upload

    # Resumed from the checkpoint at 2 batches: batches 2 and 3 again, into the same prefix,
    # and the metric still covers batches 0 to 3.
    info = ClusterInfo(TrialInfo(1, 1, {}, {}), latest_checkpoint=published[0].name)
    monkeypatch.setattr(module, "get_cluster_info", lambda: info)
    Upload.seen, reported[:] = [], []
    torch_batch_process(Upload, Items(), batch_size=2, checkpoint_interval=2, max_batches=4)
    assert Upload.seen == [2, 3] and reported == [(4, {"total": 28})]
    assert len(s3_server.keys(f"batch/{outputs}")) == 5
