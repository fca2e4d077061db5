"""``core.init()`` under torchrun: the ranks come from torchrun's environment, the searcher's one
operation reaches every rank, and a checkpoint the chief stores is restored on every rank."""

import json
import os
import pathlib
from typing import Dict, List, Optional

import pytest

from tests.distributed import jobs
from tests.fixtures.object_store import S3

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = pathlib.Path(__file__).parent / "scripts" / "core_probe.py"


def test_core_init_under_torchrun(tmp_path: pathlib.Path) -> None:
    job = jobs.run([*jobs.TORCHRUN, str(SCRIPT)], tmp_path)
    chief, worker = job.ranks(2)
    for rank, seen in enumerate((chief, worker)):
        assert (seen["rank"], seen["size"], seen["local_rank"]) == (rank, 2, rank)
        assert seen["everyone"] == [0, 10]
        assert seen["preempt"] is False
        assert seen["lengths"] == [1]
        assert seen["restored"] == "w=1"
    assert len(job.checkpoints()) == 1


def test_sigterm_to_the_chief_stops_every_rank_after_the_same_step(tmp_path: pathlib.Path) -> None:
    """WorkersAskChief: the chief's ``should_preempt()`` answer is broadcast, so a SIGTERM
    only the chief got stops both ranks after step 3; each leaves ``core.init()``'s block with
    status 75, which torchrun reports as the ranks' exit code."""
    script = pathlib.Path(__file__).parent / "scripts" / "core_preempt.py"
    job = jobs.run([*jobs.TORCHRUN, str(script)], tmp_path)
    assert not job.hung, job.output[-6000:]
    assert job.returncode != 0 and "exitcode  : 75" in job.output, job.output[-6000:]
    for rank in (0, 1):
        steps = json.loads((tmp_path / "out" / f"rank{rank}.json").read_text())
        assert steps == [1, 2, 3, "preempted"], (rank, job.output[-6000:])
    assert job.output.count("Stopped by SIGTERM: the loop returned at should_preempt()") == 1
    newest = max(job.checkpoints(), key=lambda p: int((p / "step.txt").read_text()))
    assert (newest / "step.txt").read_text() == "3"


def test_ranks_of_a_node_share_one_download_of_a_bucket_checkpoint(
    tmp_path: pathlib.Path, s3_server: S3
) -> None:
    """Determined's ``LocalWorkersShareDownload``: the local chief downloads the files some
    rank's selector accepts (here rank 0 wants a.txt, rank 1 b.txt), once for the node."""
    script = pathlib.Path(__file__).parent / "scripts" / "core_bucket_share.py"
    job = jobs.run([*jobs.TORCHRUN, str(script)], tmp_path, env={"CORE_BUCKET": s3_server.url("c")})
    chief, worker = job.ranks(2)
    assert chief["path"] == worker["path"], (chief, worker)
    for seen in (chief, worker):
        assert seen["files"] == ["a.txt", "b.txt"], seen
        assert seen["downloads"] == 1 and seen["removed"], seen
        assert seen["left"] == 0, seen
    # A rank whose selector raises gets its own error; the rest of the node is told.
    assert worker["selector1"][0] == chief["selector0"][0] == "KeyError", (chief, worker)
    assert chief["selector1"][0] == "CheckpointStorageError", chief
    assert "The selector of local rank 1 raised KeyError" in chief["selector1"][1], chief
    assert worker["selector0"][0] == "CheckpointStorageError", worker
    assert "rank 0 refuses" in worker["selector0"][1], worker


def test_node_local_collectives_of_a_core_api_loop_on_two_nodes(tmp_path: pathlib.Path) -> None:
    """torchrun on two "nodes" of two processes each: core.init() makes the per-node groups
    that allgather_local()/broadcast_local() need."""
    script = str(pathlib.Path(__file__).parent / "scripts" / "core_nodes.py")
    port = str(jobs.free_port())
    workdir = tmp_path / "nodes"
    started = jobs.time.monotonic()
    procs = [
        jobs.start(
            [
                *["-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node)],
                *["--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", port],
                script,
            ],
            workdir,
            log_name=f"node{node}.txt",
        )
        for node in (0, 1)
    ]
    job = jobs.finish(procs, workdir, started, 300, log_names=("node0.txt", "node1.txt"))
    assert not job.hung and job.returncode == 0, job.output[-6000:]
    seen = job.ranks(4)
    assert [s["local"] for s in seen] == [[0, 1], [0, 1], [2, 3], [2, 3]], seen
    assert [s["chief"] for s in seen] == ["chief 0", "chief 0", "chief 2", "chief 2"], seen
    assert all(s["everyone"] == [0, 1, 2, 3] for s in seen), seen


def _sharded_job(tmp_path: pathlib.Path, env: Optional[Dict[str, str]] = None) -> List[dict]:
    script = pathlib.Path(__file__).parent / "scripts" / "core_shards.py"
    return jobs.run([*jobs.TORCHRUN, str(script)], tmp_path, env=env).ranks(2)


def _check_sharded_outcomes(chief: dict, worker: dict) -> List[str]:
    """What both ranks saw of each call (tests/distributed/scripts/core_shards.py); returns
    the ids of the three checkpoints that must have been published, in order."""
    published = []
    for call in ("store_path", "upload", "none"):
        assert chief[call] == worker[call] and "returned" in chief[call], (call, chief, worker)
        published.append(chief[call]["returned"])
    assert len(set(published)) == 3
    assert chief["metadata_in_ckpt_dir"] and not worker["metadata_in_ckpt_dir"]
    for seen in (chief, worker):
        assert seen["clash"]["raised"] == "RuntimeError", seen
        assert "refusing to upload with files conflicts" in seen["clash"]["message"]
        assert seen["metadata"]["raised"] == "RuntimeError", seen
        assert "metadata conflicts" in seen["metadata"]["message"], seen
        assert "steps_completed" in seen["metadata"]["message"], seen
        assert seen["published"] == sorted(published), seen
    assert "clash.txt uploaded by ranks [0, 1]" in chief["clash"]["message"]
    # The rank whose block raised gets its own error; the other is told which rank failed.
    assert worker["raises"] == {"raised": "ValueError", "message": "rank 1's save failed"}
    assert chief["raises"]["raised"] == "ShardsFailed", chief
    assert "rank 1 failed (ValueError: rank 1's save failed)" in chief["raises"]["message"]
    # Both selectors' files, there when either rank returns.
    assert (
        chief["download"] == worker["download"] == {"returned": ["common.txt", "nested/own1.txt"]}
    )
    for seen in (chief, worker):  # the local chief's error, on every rank of the node
        assert seen["download_missing"]["raised"] == "CheckpointNotFound", seen
        assert "not-a-checkpoint" in seen["download_missing"]["message"], seen
    # A rank whose selector raises gets its own error; the rest of the node is told, and the
    # next collectives (the published listing) still pair up.
    assert worker["download_worker_selector"]["raised"] == "KeyError", worker
    assert chief["download_worker_selector"]["raised"] == "CheckpointStorageError", chief
    assert "The selector of local rank 1 raised KeyError" in str(chief["download_worker_selector"])
    assert chief["download_chief_selector"]["raised"] == "KeyError", chief
    assert worker["download_chief_selector"]["raised"] == "CheckpointStorageError", worker
    told = worker["download_chief_selector"]["message"]
    assert "rank 0 refuses" in told and "on this node's local chief" in told, told
    return published


SHARDED_FILES = {
    "store_path": [
        "metadata.json",
        "rank0.bin",
        "rank1.bin",
        "sub/part0.txt",
        "sub/part1.txt",
    ],
    "upload": ["common.txt", "metadata.json", "nested/own0.txt", "nested/own1.txt", "scratch.tmp"],
    "none": ["common.txt", "metadata.json", "nested/own1.txt", "scratch.tmp"],
}


def test_ranks_write_one_checkpoint_together_in_a_shared_directory(tmp_path: pathlib.Path) -> None:
    """Determined's ``store_path(shard=True)`` and ``upload(shard=True)``: every rank's files
    in one checkpoint, its metadata merged, published whole or (a conflict, a rank's
    exception) not at all, and nothing partial left in the directory."""
    chief, worker = _sharded_job(tmp_path)
    published = _check_sharded_outcomes(chief, worker)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == sorted(published)  # no .partial left
    for call, storage_id in zip(("store_path", "upload", "none"), published):
        files = sorted(
            p.relative_to(root / storage_id).as_posix()
            for p in (root / storage_id).rglob("*")
            if p.is_file()
        )
        assert files == SHARDED_FILES[call], (call, files)
    metadata = json.loads((root / published[0] / "metadata.json").read_text())
    assert metadata == {"steps_completed": 5, "per_rank": {"0": 0, "1": 10}}
    assert (root / published[0] / "rank1.bin").read_bytes() == bytes([1]) * 100
    assert json.loads((root / published[1] / "metadata.json").read_text()) == {"steps_completed": 6}


def test_ranks_write_one_checkpoint_together_in_a_bucket(
    tmp_path: pathlib.Path, s3_server: S3
) -> None:
    """The same calls on a bucket: each rank uploads its own files, the chief the metadata and
    the marker last; a refused or failed checkpoint leaves no object, and no rank leaves a
    local copy in its cache."""
    chief, worker = _sharded_job(tmp_path, env={"CORE_BUCKET": s3_server.url("c")})
    published = _check_sharded_outcomes(chief, worker)
    keys = s3_server.keys("c")
    assert sorted({k.split("/")[0] for k in keys}) == sorted(published)
    for call, storage_id in zip(("store_path", "upload", "none"), published):
        files = sorted(k.split("/", 1)[1] for k in keys if k.startswith(storage_id + "/"))
        assert files == sorted([*SHARDED_FILES[call], ".complete"]), (call, files)
    cache = pathlib.Path(os.environ["DET_LIGHTNING_CACHE_DIR"])
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_a_hugging_face_trainer_checkpoints_from_every_rank(tmp_path: pathlib.Path) -> None:
    """DetCallback's upload(shard=True) from both ranks of a DDP Trainer: one checkpoint per
    save, with the Trainer's files (rank 0's; both ranks' are the same) and the metadata."""
    script = pathlib.Path(__file__).parent / "scripts" / "hf_ddp.py"
    chief, worker = jobs.run([*jobs.TORCHRUN, str(script)], tmp_path).ranks(2)
    assert chief["world_size"] == worker["world_size"] == 2
    assert chief["published"] == worker["published"] == [4, 8, 12]
    for path in tmp_path.joinpath("checkpoints").iterdir():
        steps = json.loads((path / "metadata.json").read_text())["steps_completed"]
        files = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
        assert {f"checkpoint-{steps}/model.safetensors", "metadata.json"} <= files, files
        assert f"checkpoint-{steps}/rng_state_1.pth" in files, files  # rank 1's own RNG
