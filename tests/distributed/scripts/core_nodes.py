"""A Core API loop on two "nodes" of two ranks: the node-local collectives stay within each
node. Each rank writes what it got to out/rank<N>.json."""

import json
import pathlib

import det_lightning as det

out = pathlib.Path("out")
out.mkdir(exist_ok=True)
with det.core.init() as ctx:
    dist = ctx.distributed
    seen = {
        "rank": dist.rank,
        "cross_rank": dist.cross_rank,
        "local": dist.allgather_local(dist.rank),
        "chief": dist.broadcast_local(f"chief {dist.rank}"),
        "everyone": dist.allgather(dist.rank),
    }
(out / f"rank{seen['rank']}.json").write_text(json.dumps(seen))
