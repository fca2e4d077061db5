"""A Core API loop under torchrun: each rank writes what it saw to ``out/rank<N>.json``."""

import json
import pathlib

import det_lightning as det

with det.core.init() as ctx:
    dist = ctx.distributed
    seen = {
        "rank": dist.rank,
        "size": dist.size,
        "local_rank": dist.local_rank,
        "everyone": dist.allgather(dist.rank * 10),
        "preempt": ctx.preempt.should_preempt(),
    }
    lengths = []
    for op in ctx.searcher.operations():
        lengths.append(op.length)
        storage_id = None
        if dist.rank == 0:
            ctx.train.report_training_metrics(1, {"loss": 0.5})
            with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
                (path / "weights.txt").write_text("w=1")
            op.report_completed(0.5)
        storage_id = dist.broadcast(storage_id)
        with ctx.checkpoint.restore_path(storage_id) as path:
            seen["restored"] = (path / "weights.txt").read_text()
    seen["lengths"] = lengths
out = pathlib.Path("out")
out.mkdir(exist_ok=True)
(out / f"rank{seen['rank']}.json").write_text(json.dumps(seen))
