"""Two ranks of one node restore a checkpoint from a bucket with different selectors: one
download for the node (its local chief's), holding the files either selector accepts; it is
removed once both ranks left the block. Then each rank's selector raises in turn: every rank
raises, and nothing downloaded is left. Each rank writes what it saw to out/rank<N>.json."""

import json
import os
import pathlib

import det_lightning as det

out = pathlib.Path("out")
out.mkdir(exist_ok=True)
cache = pathlib.Path(os.environ["DET_LIGHTNING_CACHE_DIR"])
with det.core.init(checkpoint_storage=os.environ["CORE_BUCKET"]) as ctx:
    dist = ctx.distributed
    storage_id = None
    if dist.rank == 0:
        with ctx.checkpoint.store_path({"steps_completed": 3}) as (path, storage_id):
            for name in ("a.txt", "b.txt", "c.txt"):
                (path / name).write_text(name)
    storage_id = dist.broadcast(storage_id)
    wanted = "a.txt" if dist.rank == 0 else "b.txt"
    with ctx.checkpoint.restore_path(storage_id, selector=lambda p: p == wanted) as path:
        seen = {
            "rank": dist.rank,
            "path": str(path),
            "files": sorted(p.name for p in path.iterdir()),
            "downloads": len(list(cache.rglob("*.downloading"))),
        }
        dist.allgather(None)  # both ranks looked before either leaves
    dist.allgather(None)
    seen["removed"] = not pathlib.Path(seen["path"]).exists()
    for who in (1, 0):

        def selector(path: str, who: int = who) -> bool:
            if dist.rank == who:
                raise KeyError(f"rank {who} refuses {path}")
            return True

        try:
            with ctx.checkpoint.restore_path(storage_id, selector=selector):
                seen[f"selector{who}"] = "entered"
        except Exception as e:
            seen[f"selector{who}"] = [type(e).__name__, str(e)]
    dist.allgather(None)
    seen["left"] = len(list(cache.rglob("*.downloading")))
(out / f"rank{seen['rank']}.json").write_text(json.dumps(seen))
