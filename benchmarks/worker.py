"""Measurements in a fresh process: ``python benchmarks/worker.py SYSTEM W1[,W2...] OUT.json``.

``run.py`` starts one of these per system, workload and repetition (``--quick`` runs all of a
system's workloads in one process). It runs in a scratch working directory (the real Determined
copies the working directory into every checkpoint) with all storage outside it, on one thread,
and writes its measurements as JSON (rank 0 only): ``{"results": {workload: {...}}, ...}``.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import resource
import sys
import time
from typing import Any, Dict

SYSTEMS = (
    "raw",
    "raw-best",
    "lightning",
    "det_lightning",
    "det_lightning+tb",
    "det_lightning+sync",
    "determined",
    "determined+tb",
)


def _measure(system: str, workload: Any, work: pathlib.Path) -> Dict[str, Any]:
    if system in ("raw", "raw-best"):
        import raw_loop

        return raw_loop.run(workload, work, best=system == "raw-best")
    if system == "lightning":
        import lightning_module

        return lightning_module.run(workload, work)
    import det_trial

    return det_trial.run(
        system.split("+")[0],
        workload,
        work,
        tensorboard=system.endswith("+tb"),
        sync=system.endswith("+sync"),
    )


def _import_only(result: Dict[str, Any]) -> None:
    """``import torch``, then ``import det_lightning``: what the package itself adds."""
    start = time.perf_counter()
    import torch  # noqa: F401

    after_torch = time.perf_counter()
    import det_lightning  # noqa: F401

    done = time.perf_counter()
    result.update(
        torch_import_s=after_torch - start,
        det_lightning_import_s=done - after_torch,
        lightning_imported=any(
            m == "lightning" or m.startswith(("lightning.", "pytorch_lightning"))
            for m in sys.modules
        ),
    )


def _run_workload(system: str, w: Any, scratch: pathlib.Path, tag: str) -> Dict[str, Any]:
    work = scratch / tag / "cwd"
    work.mkdir(parents=True, exist_ok=True)  # ranks share it
    os.chdir(work)
    # Each workload's storage apart from the others', and outside the working directory.
    os.environ.update(
        DET_LIGHTNING_CHECKPOINT_DIR=str(work.parent / "checkpoints"),
        DET_LIGHTNING_TENSORBOARD_DIR=str(work.parent / "tensorboard"),
        XDG_DATA_HOME=str(work.parent / "determined-storage"),
    )
    return _measure(system, w, work)


def _close_process_group() -> None:
    """The workloads that start a process group themselves (Determined's torchrun recipe) leave
    it open; closed here, while Python still runs, a gloo group cannot abort the process at
    interpreter teardown after its measurements are done. The same for every system."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("system", choices=(*SYSTEMS, "import"))
    parser.add_argument("workloads", help="comma-separated workload names")
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--scratch", type=pathlib.Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--fit-steps",
        type=int,
        default=0,
        help="one fit of this many training steps and nothing else (run.py --instructions "
        "counts this whole process under callgrind)",
    )
    args = parser.parse_args()
    output: Dict[str, Any] = {"system": args.system, "results": {}}
    if args.system == "import":
        output["results"]["import"] = result = {}
        _import_only(result)
    else:
        import torch
        import workloads

        torch.set_num_threads(1)
        known = workloads.by_name(args.quick, args.device)
        for name in args.workloads.split(","):
            if args.fit_steps:
                w = dataclasses.replace(known[name], steps=args.fit_steps)
                _run_workload(args.system, w, args.scratch / name, f"steps{args.fit_steps}")
                output["results"][name] = {}
            else:
                output["results"][name] = _run_workload(
                    args.system, known[name], args.scratch, name
                )
    _close_process_group()
    if int(os.environ.get("RANK", "0")) != 0:
        return
    output["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    args.out.write_text(json.dumps(output))


if __name__ == "__main__":
    main()
