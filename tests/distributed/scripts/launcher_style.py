"""A launcher-style Core API script, shaped as Determined's ``core_api/4_distributed.py``:
run as ``python3 launcher_style.py launcher`` once per node, it starts a worker per slot
through ``python3 -m determined.launch.wrap_rank RANK -- python3 launcher_style.py worker``;
each worker builds its own ``DistributedContext(chief_ip=...)``.

Each step adds the sum of every rank's ``increment_by`` (an allgather) to ``x``; the chief
reports ``x`` and checkpoints it every 2 steps, and then every rank asks for the experiment's
best validation. From step ``hold`` on, the workers wait until
``$RELEASE`` exists (the chief decides, so both ranks make the same collective calls), asking
``should_preempt()`` as they wait.
"""

import logging
import os
import pathlib
import subprocess
import sys
import time

import determined as det


def train(core_context: "det.core.Context", hparams: dict, latest: str, trial_id: int) -> None:
    x, start = 0, 0
    if latest is not None:
        with core_context.checkpoint.restore_path(latest) as path:
            x, start, owner = (int(v) for v in (path / "state").read_text().split(","))
        if owner != trial_id:
            x, start = 0, 0
        logging.info(f"resumed at step {start} with x={x}")
    release = pathlib.Path(os.environ["RELEASE"])
    for step in range(start, hparams["steps"]):
        x += sum(core_context.distributed.allgather(hparams["increment_by"]))
        done = step + 1
        if done % 2 == 0 and core_context.distributed.rank == 0:
            core_context.train.report_validation_metrics(steps_completed=done, metrics={"x": x})
            with core_context.checkpoint.store_path({"steps_completed": done}) as (path, _):
                (path / "state").write_text(f"{x},{done},{trial_id}")
        if done % 2 == 0:  # every rank asks for the experiment's best, after the chief reported
            core_context.distributed.broadcast(None)
            best = core_context.train.get_experiment_best_validation()
            bests = core_context.distributed.allgather(best)
            if core_context.distributed.rank == 0:
                logging.info(f"bests at step {done}: {bests}")
        while done >= hparams["hold"] and not core_context.distributed.broadcast(release.exists()):
            if core_context.preempt.should_preempt():
                return
            time.sleep(0.05)
        if core_context.preempt.should_preempt():
            return


def launcher(info: "det.ClusterInfo") -> int:
    slots = len(info.slot_ids)
    workers = [
        subprocess.Popen(
            ["python3", "-m", "determined.launch.wrap_rank", str(rank), "--"]
            + ["python3", __file__, "worker", str(rank)]
        )
        for rank in range(slots)
    ]
    return max(worker.wait() for worker in workers)


def worker(info: "det.ClusterInfo", rank: int) -> None:
    slots, nodes = len(info.slot_ids), len(info.container_addrs)
    distributed = det.core.DistributedContext(
        rank=rank,
        size=slots * nodes,
        local_rank=rank,
        local_size=slots,
        cross_rank=info.container_rank,
        cross_size=nodes,
        chief_ip=info.container_addrs[0],
    )
    logging.info(f"worker {rank} of {slots}, python {sys.executable}")
    with det.core.init(distributed=distributed) as core_context:
        train(core_context, info.trial.hparams, info.latest_checkpoint, info.trial.trial_id)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    cluster = det.get_cluster_info()
    assert cluster is not None, "this script runs as a trial"
    if sys.argv[1] == "launcher":
        sys.exit(launcher(cluster))
    worker(cluster, int(sys.argv[2]))
