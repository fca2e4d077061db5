"""Two ranks write checkpoints together (``shard=True``) into ``$CORE_BUCKET`` or, without it,
./checkpoints; each rank records what each call returned or raised in out/rank<N>.json.

    store_path   each rank writes its own file; their metadata merges
    upload       a per-rank directory plus a file both hold with the same content; rank 1
                 gives a selector; a rank-local file the selector refuses stays out
    none         rank 0 passes ckpt_dir=None: only rank 1's files
    clash        both hold clash.txt with different contents: refused, nothing published
    metadata     both give steps_completed, differently: refused, nothing published
    raises       rank 1's store_path block raises: nothing published, both raise
    download     both ranks download one checkpoint into one folder, each with a selector;
                 then a selector raises, the worker's and then the chief's: every rank raises
"""

import json
import os
import pathlib
from typing import Any, Callable, Dict

import det_lightning as det

out = pathlib.Path("out")
out.mkdir(exist_ok=True)
seen: Dict[str, Any] = {}


def outcome(name: str, call: Callable[[], Any]) -> None:
    try:
        seen[name] = {"returned": call()}
    except Exception as e:
        seen[name] = {"raised": type(e).__name__, "message": str(e)}


with det.core.init(checkpoint_storage=os.environ.get("CORE_BUCKET")) as ctx:
    dist = ctx.distributed
    rank = dist.rank
    seen["rank"] = rank

    def store_path() -> str:
        metadata = {"steps_completed": 5, "per_rank": {str(rank): rank * 10}}
        with ctx.checkpoint.store_path(metadata, shard=True) as (path, storage_id):
            (path / f"rank{rank}.bin").write_bytes(bytes([rank]) * 100)
            (path / "sub").mkdir(exist_ok=True)
            (path / "sub" / f"part{rank}.txt").write_text(f"part {rank}")
        return storage_id

    outcome("store_path", store_path)

    mine = pathlib.Path(f"rank{rank}-dir")
    (mine / "nested").mkdir(parents=True, exist_ok=True)
    (mine / "common.txt").write_text("the same on every rank")
    (mine / "nested" / f"own{rank}.txt").write_text(str(rank))
    (mine / "scratch.tmp").write_text("not in the checkpoint")
    selector = None if rank == 0 else (lambda p: not p.endswith(".tmp"))
    outcome(
        "upload",
        lambda: ctx.checkpoint.upload(mine, {"steps_completed": 6}, shard=True, selector=selector),
    )
    seen["metadata_in_ckpt_dir"] = (mine / "metadata.json").exists()

    outcome(
        "none",
        lambda: ctx.checkpoint.upload(
            None if rank == 0 else mine, {"steps_completed": 7}, shard=True
        ),
    )

    clash = pathlib.Path(f"clash{rank}")
    clash.mkdir(exist_ok=True)
    (clash / "clash.txt").write_text(f"rank {rank}'s")
    outcome("clash", lambda: ctx.checkpoint.upload(clash, shard=True))

    outcome(
        "metadata",
        lambda: ctx.checkpoint.upload(mine, {"steps_completed": rank}, shard=True),
    )

    def raises() -> str:
        with ctx.checkpoint.store_path({"steps_completed": 9}, shard=True) as (path, storage_id):
            (path / f"rank{rank}.bin").write_bytes(b"x")
            if rank == 1:
                raise ValueError("rank 1's save failed")
        return storage_id

    outcome("raises", raises)

    # Every rank downloads into one folder: the node's local chief copies the files either
    # rank's selector accepts, once; both return when they are there.
    def download() -> list:
        wanted = "common.txt" if rank == 0 else "nested/own1.txt"
        ctx.checkpoint.download(seen["upload"]["returned"], "dl", selector=lambda p: p == wanted)
        return sorted(
            p.relative_to("dl").as_posix() for p in pathlib.Path("dl").rglob("*") if p.is_file()
        )

    outcome("download", download)
    outcome("download_missing", lambda: ctx.checkpoint.download("not-a-checkpoint", "dl2"))

    def refuses(who: int) -> Callable[[str], bool]:
        def selector(path: str) -> bool:
            if rank == who:
                raise KeyError(f"rank {who} refuses {path}")
            return True

        return selector

    for who, call in ((1, "download_worker_selector"), (0, "download_chief_selector")):
        outcome(
            call,
            lambda who=who, call=call: ctx.checkpoint.download(
                seen["upload"]["returned"], f"dl-{call}", selector=refuses(who)
            ),
        )
    dist.allgather(None)
    seen["published"] = sorted(entry.name for entry in ctx.checkpoint.store.published())

(out / f"rank{rank}.json").write_text(json.dumps(seen))
