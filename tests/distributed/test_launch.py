"""Two processes on CPU (gloo), started by Lightning (``--devices 2``) and by torchrun.

One probe run per launcher, shared by the tests of this module (each run costs seconds of
interpreter start-up). The oracle is a single process with the same global batch size: with
Determined's round-robin sharding rank ``r`` takes per-slot batches ``r, r+N, ...``, so the union
of one step's per-slot batches is exactly the single process's batch, and DDP's averaged
gradient is that batch's gradient.
"""

import json
import pathlib
from typing import Callable, Dict, List, Optional

import numpy as np
import pytest

from tests.distributed import jobs

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

PROBE = str(jobs.PROBE)
COMMON = ["--accelerator", "cpu", "--global-batch-size", "8", "--aggregation-frequency", "2"]


@pytest.fixture(scope="module")
def two_procs(tmp_path_factory: pytest.TempPathFactory) -> jobs.Job:
    """``python probe.py --devices 2``: 8 batches (4 optimizer steps), validation every 4."""
    workdir = tmp_path_factory.mktemp("two_procs")
    return jobs.run([PROBE, "--out", "out", "--devices", "2", *COMMON, "--batches", "8"], workdir)


@pytest.fixture(scope="module")
def two_procs_plain(tmp_path_factory: pytest.TempPathFactory) -> jobs.Job:
    """``two_procs`` on Lightning's own loop, backward and step (``DET_LIGHTNING_LEAN=0``), gloo's
    socket threads left at the training thread's priority."""
    workdir = tmp_path_factory.mktemp("two_procs_plain")
    return jobs.run(
        [PROBE, "--out", "out", "--devices", "2", *COMMON, "--batches", "8"],
        workdir,
        env={"DET_LIGHTNING_LEAN": "0", "DET_LIGHTNING_GLOO_LOOP_NICE": "0"},
    )


@pytest.fixture(scope="module")
def one_proc(tmp_path_factory: pytest.TempPathFactory) -> jobs.Job:
    """The oracle: one process, the same global batch, 12 batches (validation at 4, 8, 12)."""
    workdir = tmp_path_factory.mktemp("one_proc")
    return jobs.run([PROBE, "--out", "out", "--devices", "1", *COMMON, "--batches", "12"], workdir)


@pytest.fixture(scope="module")
def torchrun_resumed(tmp_path_factory: pytest.TempPathFactory, two_procs: jobs.Job) -> jobs.Job:
    """``torchrun --nproc_per_node=2 probe.py`` resuming the two-process run's checkpoint to
    batch 12, with 30 validation records (the ranks get 4 and 4 batches, one of them short)."""
    (checkpoint,) = two_procs.checkpoints()
    workdir = tmp_path_factory.mktemp("torchrun")
    return jobs.run(
        [
            *jobs.TORCHRUN,
            PROBE,
            "--out",
            "out",
            *COMMON,
            "--batches",
            "12",
            "--val-size",
            "30",
            "--resume",
            str(checkpoint),
        ],
        workdir,
    )


def _close(a: List[float], b: List[float], tol: float = 1e-6) -> bool:
    return bool(np.allclose(np.array(a), np.array(b), rtol=0, atol=tol))


def test_the_trial_sees_its_rank_and_a_joined_process_group_in_init(two_procs: jobs.Job) -> None:
    for rank, record in enumerate(two_procs.ranks(2)):
        assert record["init"] == {
            "rank": rank,
            "size": 2,
            "local_rank": rank,
            "local_size": 2,
            "cross_rank": 0,
            "cross_size": 1,
            "per_slot_batch_size": 4,
            "global_batch_size": 8,
            "device": "cpu",
            "process_group": True,
            "gathered_ranks": [0, 1],
            "gathered_by_chief": [0, 1] if rank == 0 else None,
            "local_ranks": [0, 1],
            "local_chief": 0,
            "node0_only": [0, 1] if rank == 0 else None,
        }


def test_the_process_group_init_started_is_closed_before_python_tears_down(
    two_procs: jobs.Job,
) -> None:
    """Left to the interpreter's teardown, gloo's threads could abort a finished job
    ("terminate called without an active exception", exit -6) after it succeeded."""
    two_procs.ranks(2)
    for rank in (0, 1):
        exit_record = json.loads((two_procs.workdir / "out" / f"rank{rank}-exit.json").read_text())
        assert exit_record == {"process_group": False, "c10d_threads": []}


def test_the_lean_path_is_invisible_with_two_processes(
    two_procs: jobs.Job, two_procs_plain: jobs.Job
) -> None:
    """Every hook sees the same loop state, and losses, validations, weights and DDP's
    gradient all-reduces come out identical, with the lean path and without it."""
    lean, plain = two_procs.ranks(2), two_procs_plain.ranks(2)
    for rank in (0, 1):
        lean[rank].pop("priorities"), plain[rank].pop("priorities")
        assert lean[rank].pop("epoch_loop") == "LeanTrainingEpochLoop"
        assert plain[rank].pop("epoch_loop") == "_TrainingEpochLoop"
        assert len(lean[rank]["trace"]) == 8 * 4 + 4 + 2 * 2  # batches, steps, validations
        assert [e[0] for e in lean[rank]["trace"]].count("on_before_optimizer_step") == 4
        assert lean[rank] == plain[rank]


def test_gloo_socket_threads_run_below_the_training_thread(
    two_procs: jobs.Job, two_procs_plain: jobs.Job
) -> None:
    """gloo's epoll loop spins while its work thread holds a connection's lock; ten nice levels
    lower, it no longer takes the core from that thread (adapters/gloo_loop.py).
    ``DET_LIGHTNING_GLOO_LOOP_NICE=0`` leaves it as gloo made it."""
    for lowered, left in zip(two_procs.ranks(2), two_procs_plain.ranks(2)):
        training = lowered["priorities"]["training"]
        assert lowered["priorities"]["gloo_loops"]  # (the groups share one device's)
        assert set(lowered["priorities"]["gloo_loops"]) == {min(19, training + 10)}
        assert set(left["priorities"]["gloo_loops"]) == {left["priorities"]["training"]}


def test_two_processes_train_like_one_with_the_same_global_batch(
    two_procs: jobs.Job, one_proc: jobs.Job
) -> None:
    (single,) = one_proc.ranks(1)
    ranks = two_procs.ranks(2)
    at_batch_8 = single["weights_at_validation"][1]
    assert not _close(single["weights_at_validation"][0], at_batch_8, tol=1e-3)  # it trained
    for record in ranks:
        assert _close(record["weights"], at_batch_8)
        assert _close(record["losses"], single["losses"][:8])  # averaged over the ranks
        for mine, oracle in zip(record["validations"], single["validations"][:2]):
            assert mine["validation_loss"] == pytest.approx(oracle["validation_loss"], abs=1e-6)
    assert ranks[0]["weights"] == ranks[1]["weights"]


def test_accumulating_batches_skip_the_gradient_all_reduce(
    two_procs: jobs.Job, one_proc: jobs.Job
) -> None:
    """aggregation_frequency=2: 8 batches, 4 optimizer steps, so 4 all-reduces (not 8)."""
    assert [r["allreduces"] for r in two_procs.ranks(2)] == [4, 4]
    assert two_procs.ranks(2)[0]["ddp"] == {"wraps": "TrialModule", "find_unused_parameters": False}
    assert one_proc.ranks(1)[0]["allreduces"] == 0  # no DDP in a single process


def test_a_metric_reducer_sees_every_validation_record_exactly_once(
    two_procs: jobs.Job, torchrun_resumed: jobs.Job
) -> None:
    for job, records in ((two_procs, 32), (torchrun_resumed, 30)):
        for record in job.ranks(2):
            assert record["validations"]
            for metrics in record["validations"]:
                assert metrics["seen_ids"] == list(range(records))
                assert metrics["ranks_reporting"] == 2


def test_callbacks_run_on_every_rank_and_only_the_chief_writes(two_procs: jobs.Job) -> None:
    chief, worker = two_procs.ranks(2)
    assert [e for e, _ in chief["events"]] == [
        "startup",
        "checkpoint_save",
        "checkpoint_upload_end",
        "shutdown",
    ]
    assert [e for e, _ in worker["events"]] == ["startup", "checkpoint_upload_end", "shutdown"]
    assert worker["validations"] == chief["validations"]
    assert worker["losses"] == chief["losses"]
    assert len(two_procs.checkpoints()) == 1
    events = list((two_procs.workdir / "tensorboard").rglob("*tfevents*"))
    assert len(events) == 1, events


def test_torchrun_resumes_every_rank_from_one_checkpoint(
    torchrun_resumed: jobs.Job, one_proc: jobs.Job
) -> None:
    (single,) = one_proc.ranks(1)
    for rank, record in enumerate(torchrun_resumed.ranks(2)):
        assert record["init"]["rank"] == rank and record["init"]["size"] == 2
        assert record["events"][:2] == [["startup", 8], ["checkpoint_load", 0]]
        assert _close(record["weights"], single["weights"])
        assert _close(record["losses"], single["losses"][8:])


def test_determined_recipe_with_a_strategy_object_and_evaluate_full_dataset(
    tmp_path: pathlib.Path,
) -> None:
    """Determined's local recipe (torchrun, init_process_group(),
    DistributedContext.from_torch_distributed() passed to init(distributed=...)), with
    init(strategy=DDPStrategy(find_unused_parameters=True)) for a model with an unused
    parameter, validated by evaluate_full_dataset, which runs on the chief only."""
    job = jobs.run(
        [
            *jobs.TORCHRUN,
            PROBE,
            "--out",
            "out",
            "--accelerator",
            "cpu",
            "--torch-distributed",
            "--find-unused-parameters",
            "--unused-parameter",
            "--full-dataset",
            "--batches",
            "4",
        ],
        tmp_path / "recipe",
    )
    chief, worker = job.ranks(2)
    for record in (chief, worker):
        assert record["ddp"] == {"wraps": "TrialModule", "find_unused_parameters": True}
    assert ["evaluate_full_dataset", 0] in chief["events"]
    assert not any(e == "evaluate_full_dataset" for e, _ in worker["events"])
    assert len(chief["validations"]) == 1
    assert worker["validations"] == chief["validations"]
    assert worker["init"]["size"] == 2 and worker["init"]["process_group"]
    for rank in (0, 1):
        exit_record = json.loads(
            (tmp_path / "recipe" / "out" / f"rank{rank}-exit.json").read_text()
        )
        # The script made the process group, so closing it is the script's call; once it has,
        # nothing of ours keeps the group's threads running into the interpreter's teardown.
        assert exit_record == {"open_after_init": True, "process_group": False, "c10d_threads": []}


def _run_nodes(
    workdir: pathlib.Path,
    args_of: Callable[[int], List[str]],
    timeout: float,
    env_of: Callable[[int], Dict[str, str]] = lambda node: {},
) -> jobs.Job:
    """Two "nodes" on this machine sharing ``workdir`` (as a shared file system): node ``n``
    runs ``python *args_of(n)`` in its own session, with ``env_of(n)``."""
    started = jobs.time.monotonic()
    procs = [
        jobs.start(args_of(node), workdir, env_of(node), log_name=f"node{node}.txt")
        for node in (0, 1)
    ]
    return jobs.finish(procs, workdir, started, timeout, log_names=("node0.txt", "node1.txt"))


def test_two_nodes_of_two_processes_train_like_one(
    tmp_path: pathlib.Path, one_proc: jobs.Job
) -> None:
    """``--num-nodes 2``, each node's script started with NODE_RANK/MASTER_ADDR/MASTER_PORT (as
    a cluster scheduler would); node-local collectives stay within each node."""
    port = str(jobs.free_port())
    workdir = tmp_path / "nodes"
    args = [PROBE, "--out", "out", "--devices", "2", "--num-nodes", "2", *COMMON, "--batches", "8"]
    job = _run_nodes(
        workdir,
        lambda node: args,
        timeout=240,
        env_of=lambda node: {
            "NODE_RANK": str(node),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        },
    )
    (single,) = one_proc.ranks(1)
    for rank, record in enumerate(job.ranks(4)):
        init = record["init"]
        node = rank // 2
        assert (init["rank"], init["size"], init["local_rank"], init["cross_rank"]) == (
            rank,
            4,
            rank % 2,
            node,
        )
        assert init["per_slot_batch_size"] == 2 and init["cross_size"] == 2
        assert init["local_ranks"] == [2 * node, 2 * node + 1]
        assert init["local_chief"] == 2 * node
        assert init.get("node0_only") == ([0, 1] if rank == 0 else None)
        assert _close(record["weights"], single["weights_at_validation"][1])
        # The per-node groups went with the world group init() closed, threads and all.
        exit_record = json.loads((workdir / "out" / f"rank{rank}-exit.json").read_text())
        assert exit_record == {"process_group": False, "c10d_threads": []}
    assert len(job.checkpoints()) == 1


def _torchrun_nodes(
    workdir: pathlib.Path, *args: str, checkpoints: Optional[pathlib.Path] = None
) -> jobs.Job:
    """``torchrun --nnodes 2 --node_rank N --nproc_per_node 1 probe.py`` as each of two "nodes",
    meeting at a free port on loopback (what ``srun torchrun ... --node_rank $SLURM_NODEID``
    starts on a cluster); ``checkpoints``: another run's checkpoint folder."""
    port = str(jobs.free_port())

    def args_of(node: int) -> List[str]:
        return [
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--node_rank",
            str(node),
            "--nproc_per_node",
            "1",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            port,
            PROBE,
            "--out",
            "out",
            "--num-nodes",
            "2",
            *COMMON,
            *args,
        ]

    env = {"DET_LIGHTNING_CHECKPOINT_DIR": str(checkpoints)} if checkpoints else {}
    job = _run_nodes(workdir, args_of, timeout=900, env_of=lambda node: env)
    assert not job.hung, f"the nodes hung until killed:\n{job.output[-4000:]}"
    return job


def _steps(checkpoint: pathlib.Path) -> int:
    return int(json.loads((checkpoint / "metadata.json").read_text())["steps_completed"])


def test_two_torchrun_nodes_checkpoint_once_and_resume_like_a_straight_run(
    tmp_path: pathlib.Path,
) -> None:
    """Two torchrun "nodes" of one process each: every checkpoint is written once, by the
    global chief (node 1's process, its node's local chief, writes none), and a rerun with
    ``latest_checkpoint="latest"`` resumes the newest one and ends with the weights and losses
    of a run that never stopped, bit for bit."""
    first = _torchrun_nodes(tmp_path / "first", "--batches", "8", "--checkpoint-period", "4")
    chief, other = first.ranks(2)
    assert [
        (r["init"]["rank"], r["init"]["cross_rank"], r["init"]["local_rank"])
        for r in (chief, other)
    ] == [(0, 0, 0), (1, 1, 0)]
    assert [e for e, _ in chief["events"]] == [
        "startup",
        "checkpoint_save",
        "checkpoint_upload_end",
        "checkpoint_save",
        "checkpoint_upload_end",
        "shutdown",
    ]
    assert [e for e, _ in other["events"]] == [
        "startup",
        "checkpoint_upload_end",
        "checkpoint_upload_end",
        "shutdown",
    ]
    kept = sorted(_steps(c) for c in first.checkpoints())
    assert kept in ([8], [4, 8]), kept  # retention may have deleted the first; none twice

    straight = _torchrun_nodes(tmp_path / "straight", "--batches", "12", "--checkpoint-period", "4")
    resumed = _torchrun_nodes(
        tmp_path / "resumed",
        "--batches",
        "12",
        "--checkpoint-period",
        "4",
        "--resume",
        "latest",
        checkpoints=first.workdir / "checkpoints",
    )
    for mine, oracle in zip(resumed.ranks(2), straight.ranks(2)):
        assert mine["events"][:2] == [["startup", 8], ["checkpoint_load", 0]]
        assert mine["weights"] == oracle["weights"]
        assert mine["losses"] == oracle["losses"][8:]
        assert mine["batches_trained"] == 12
    assert sorted(_steps(c) for c in first.checkpoints())[-1] == 12


def test_background_writes_on_two_nodes_resume_like_a_straight_run(tmp_path: pathlib.Path) -> None:
    """The chief writes in the background while both ranks train on; the next checkpoint and
    fit()'s end wait for it on every rank, and a rerun resumes bit for bit."""
    background = "--background-writes"
    first = _torchrun_nodes(
        tmp_path / "first", "--batches", "8", "--checkpoint-period", "4", background
    )
    chief, other = first.ranks(2)
    assert [e for e, _ in chief["events"]] == [
        "startup",
        "checkpoint_save",
        "checkpoint_save",
        "shutdown",
    ]
    assert [e for e, _ in other["events"]] == ["startup", "shutdown"]
    assert sorted(_steps(c) for c in first.checkpoints())[-1] == 8
    assert not [p for p in (first.workdir / "checkpoints").iterdir() if p.name.startswith(".")]

    straight = _torchrun_nodes(
        tmp_path / "straight", "--batches", "12", "--checkpoint-period", "4", background
    )
    resumed = _torchrun_nodes(
        tmp_path / "resumed",
        "--batches",
        "12",
        "--checkpoint-period",
        "4",
        "--resume",
        "latest",
        background,
        checkpoints=first.workdir / "checkpoints",
    )
    for mine, oracle in zip(resumed.ranks(2), straight.ranks(2)):
        assert mine["events"][:2] == [["startup", 8], ["checkpoint_load", 0]]
        assert mine["weights"] == oracle["weights"]
        assert mine["losses"] == oracle["losses"][8:]
    assert sorted(_steps(c) for c in first.checkpoints())[-1] == 12


@pytest.mark.parametrize("crashing_rank", [1, 0])
def test_an_exception_on_one_rank_ends_the_job_with_that_error(
    tmp_path: pathlib.Path, crashing_rank: int
) -> None:
    job = jobs.run(
        [
            PROBE,
            "--out",
            "out",
            "--devices",
            "2",
            "--accelerator",
            "cpu",
            "--crash-rank",
            str(crashing_rank),
            "--crash-batch",
            "1",
        ],
        tmp_path / "crash",
        timeout=400,
    )
    assert job.returncode != 0
    assert f"probe crash on rank {crashing_rank} at batch 1" in job.output
    assert not job.hung, f"the job hung until killed:\n{job.output[-3000:]}"
    assert not (tmp_path / "crash" / "out").exists()
