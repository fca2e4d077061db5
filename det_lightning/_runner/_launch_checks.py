"""Launch options checked before anything starts: a bad ``--accelerator``/``--devices`` is an
argparse-style one-line usage error (exit 2), not a Lightning traceback from the first process;
more processes than the machine has cores or GPUs is a warning.

The value checks (``--devices abc``, ``--num-nodes 0``) are the argument types in
``det_lightning.pytorch._launch``; what needs the machine (is there a GPU?) is here, with
``launch_options`` (those a command line gave) and ``already_launched`` (is this process one of
several that something else started?).
"""

import argparse
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from det_lightning._job_processes import cpu_count, oversubscribed
from det_lightning.pytorch._launch_options import LAUNCH_OPTIONS

GPU_ACCELERATORS = ("gpu", "cuda")


def gpu_count() -> int:
    """CUDA devices this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def launch_problem(options: Mapping[str, Any], gpus: int) -> Optional[str]:
    """What is wrong with the launch ``options`` on a machine with ``gpus`` GPUs, as argparse
    words it (``argument --X: ...``), or None.

    >>> launch_problem({"accelerator": "gpu"}, gpus=0)  # doctest: +ELLIPSIS
    'argument --accelerator: gpu: this machine has no CUDA GPU (torch.cuda.is_available() is \
False); use --accelerator cpu, or leave --accelerator out'
    >>> launch_problem({"accelerator": "cuda", "devices": 4}, gpus=2)  # doctest: +ELLIPSIS
    'argument --devices: 4: this machine has 2 GPUs; ...'
    >>> launch_problem({"accelerator": "cpu", "devices": "0,1"}, gpus=0)  # doctest: +ELLIPSIS
    "argument --devices: '0,1': a list of device indices is for GPUs; ..."
    >>> launch_problem({"devices": 2}, gpus=0) is None
    True
    """
    accelerator = str(options.get("accelerator") or "auto").lower()
    devices = options.get("devices")
    if accelerator in GPU_ACCELERATORS and gpus == 0:
        return (
            f"argument --accelerator: {accelerator}: this machine has no CUDA GPU "
            "(torch.cuda.is_available() is False); use --accelerator cpu, or leave "
            "--accelerator out"
        )
    if accelerator in GPU_ACCELERATORS and isinstance(devices, int) and devices > gpus:
        return (
            f"argument --devices: {devices}: this machine has {gpus} GPU"
            f"{'s' if gpus != 1 else ''}; use --devices {gpus} or fewer (-1 for all)"
        )
    if accelerator == "cpu" and isinstance(devices, str) and "," in devices:
        return (
            f"argument --devices: {devices!r}: a list of device indices is for GPUs; on the "
            "CPU give a count of processes, e.g. --devices 2"
        )
    return None


def on_gpu(options: Mapping[str, Any], gpus: int) -> bool:
    """Whether the processes of ``options`` train on GPUs (Lightning's ``auto`` picks them
    where there are any)."""
    accelerator = str(options.get("accelerator") or "auto").lower()
    return accelerator in GPU_ACCELERATORS or (accelerator == "auto" and gpus > 0)


def warn_if_oversubscribed(options: Mapping[str, Any], asked: str) -> None:
    """Prints ``oversubscribed``'s warning for ``options["devices"]`` processes, if any
    (``asked``: where the count came from, e.g. ``--devices 3``)."""
    gpus = gpu_count()
    warning = oversubscribed(
        processes=options["devices"],
        asked=asked,
        on_gpu=on_gpu(options, gpus),
        cpus=cpu_count(),
        gpus=gpus,
    )
    if warning:
        print(f"det-lightning: {warning}", file=sys.stderr, flush=True)


def launch_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The launch options given on a command line (those left out are absent)."""
    given = {name: getattr(args, name) for name in LAUNCH_OPTIONS}
    return {name: value for name, value in given.items() if value is not None}


def already_launched(environ: Mapping[str, str]) -> bool:
    """Whether this process is one of several that torchrun, Lightning or SLURM started."""
    several_tasks = int(environ.get("SLURM_NTASKS", "1") or 1) > 1
    return "LOCAL_RANK" in environ or "TORCHELASTIC_RUN_ID" in environ or several_tasks


class LaunchCheckingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that, where it has launch options, refuses those this machine
    cannot run (``launch_problem``) as argparse refuses a bad value: usage, one error line,
    exit status 2."""

    def parse_known_args(  # type: ignore[override]
        self, args: Optional[Sequence[str]] = None, namespace: Optional[argparse.Namespace] = None
    ) -> Tuple[argparse.Namespace, List[str]]:
        parsed, rest = super().parse_known_args(args, namespace)
        if all(hasattr(parsed, name) for name in LAUNCH_OPTIONS):
            options = {name: getattr(parsed, name) for name in LAUNCH_OPTIONS}
            wants_gpu = str(options["accelerator"] or "").lower() in GPU_ACCELERATORS
            problem = launch_problem(options, gpu_count() if wants_gpu else 0)
            if problem:
                self.error(problem)
        return parsed, rest


__all__ = [
    "LaunchCheckingParser",
    "already_launched",
    "gpu_count",
    "launch_options",
    "launch_problem",
    "on_gpu",
    "warn_if_oversubscribed",
]
