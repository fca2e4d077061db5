"""A Core API loop under torchrun whose chief alone gets SIGTERM at step 3: under
WorkersAskChief every rank's ``should_preempt()`` is the chief's answer, so both ranks stop
after the same step. Each rank writes the steps it ran to ``out/rank<N>.json``."""

import json
import os
import pathlib
import signal

import det_lightning as det

out = pathlib.Path("out")
out.mkdir(exist_ok=True)
with det.core.init() as ctx:
    dist = ctx.distributed
    steps: list = []
    for step in range(1, 11):
        dist.allgather(step)  # the ranks in step
        if step == 3 and dist.rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        if dist.rank == 0:
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "step.txt").write_text(str(step))
        steps.append(step)
        if ctx.preempt.should_preempt():
            steps.append("preempted")
            break
    (out / f"rank{dist.rank}.json").write_text(json.dumps(steps))
