"""Starting the job's processes in ``init()``, before the trial exists.

A trial reads ``context.distributed`` in its ``__init__`` (Determined's MNIST tutorial divides
the batch size by ``get_size()`` there), so every process must be running, with its process
group joined, before ``init()`` yields. Lightning starts processes inside ``Trainer.fit``; we run
the same machinery early, on a ``lightning.Trainer`` built from the launch options only::

    trainer = lightning.Trainer(accelerator, devices, num_nodes, strategy, precision)
    trainer.strategy.launcher.launch(nothing)   # `python train.py --devices N`: Lightning re-runs
                                                #   the script per local rank, LOCAL_RANK etc. in
                                                #   their environment, and watches them (one
                                                #   failing ends all); torchrun/SLURM: no-op
    trainer.strategy.setup_environment()        # the device; init_process_group (gloo on CPU)

The ``lightning.Trainer`` that ``fit()`` builds gets the same options. It finds ``LOCAL_RANK``
in the environment (so it does not relaunch) and the process group initialized (so it does not
rejoin), and its strategy wraps the whole ``TrialModule`` as usual.
"""

import atexit
import copy
import gc
import os
import sys
from typing import Any, Dict, Optional

from det_lightning._job_processes import cpu_count, oversubscribed, quiet_unless_chief
from det_lightning.adapters.lightning_trainer import quiet_lightning_setup
from det_lightning.core import DistributedContext, DummyDistributedContext
from det_lightning.core._distributed import init_local_groups
from det_lightning.pytorch._launch_options import Launched, LaunchOptions


def start_processes(options: Dict[str, Any], distributed: Optional[DistributedContext]) -> Launched:
    """Launches (or joins) the processes for ``options``; see the module docstring.

    Args:
        options: Lightning's launch options, already resolved (None: Lightning's default).
        distributed: the user's own ``DistributedContext``, if any; it must agree with Lightning.
    """
    strategy = _launch_strategy(options)
    quiet_unless_chief(os.environ)  # Lightning's launcher set this process's ranks
    joined_before = _process_group_exists()
    strategy.setup_environment()
    if not joined_before and _process_group_exists():
        # Lightning leaves a gloo process group for the interpreter's own teardown, where its
        # threads can end the process with SIGABRT ("terminate called without an active
        # exception") after the script succeeded; close it while Python still runs.
        atexit.register(_close_process_group)
    ours = _distributed_context(strategy)
    if distributed is not None and (distributed.rank, distributed.size) != (ours.rank, ours.size):
        raise ValueError(
            f"init(distributed={distributed!r}) does not match the processes Lightning sees "
            f"(rank {ours.rank} of {ours.size}, from devices={options.get('devices', 'auto')!r}, "
            f"num_nodes={options.get('num_nodes', 1)!r}). Launch with torchrun, whose "
            "environment DistributedContext.from_torch_distributed() reads, or leave out "
            "distributed= and let `python train.py --devices N` start the processes."
        )
    context = distributed or ours
    init_local_groups(context)
    return Launched(context, strategy.root_device, LaunchOptions.of(options))


def _launch_strategy(options: Dict[str, Any]) -> Any:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import Strategy

    from det_lightning.adapters.lightning.internals import reruns_the_script

    # Precision plays no part in starting processes, and fit() maps it (adapters/precision.py).
    early = {k: v for k, v in options.items() if k != "precision"}
    if isinstance(early.get("strategy"), Strategy):
        # Lightning configures a strategy instance in place; fit()'s Trainer gets the untouched one.
        early["strategy"] = copy.deepcopy(early["strategy"])
    with quiet_lightning_setup():
        trainer = pl.Trainer(
            **early,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
    strategy = trainer.strategy
    launcher = strategy.launcher
    if launcher is not None and not reruns_the_script(launcher):
        raise NotImplementedError(
            f"init(strategy={options.get('strategy')!r}) starts its processes with "
            f"{type(launcher).__name__}, which runs only the fit() call in the new processes; "
            "the trial must be built in every process. Use a strategy that re-runs the script "
            "(strategy='ddp', the default with several devices; 'fsdp'; 'deepspeed'), or launch "
            "with torchrun."
        )
    if launcher is not None:
        environment = getattr(strategy, "cluster_environment", None)  # a parallel strategy's
        if environment is None or not environment.creates_processes_externally:  # Lightning's
            _warn_if_oversubscribed(trainer)
        launcher.launch(lambda: None)
    return strategy


def _warn_if_oversubscribed(trainer: Any) -> None:
    """Before Lightning starts the other processes: a warning when there are more than cores
    (on the CPU) or GPUs."""
    from lightning.pytorch.accelerators import CUDAAccelerator

    on_gpu = isinstance(trainer.accelerator, CUDAAccelerator)
    warning = oversubscribed(
        processes=trainer.num_devices,
        asked=f"devices={trainer.num_devices}",
        on_gpu=on_gpu,
        cpus=cpu_count(),
        gpus=CUDAAccelerator.auto_device_count() if on_gpu else 0,
    )
    if warning:
        print(f"det_lightning: {warning}", file=sys.stderr, flush=True)


def _process_group_exists() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _close_process_group() -> None:
    import torch.distributed as dist

    if _process_group_exists():
        dist.destroy_process_group()
        # destroy_process_group() only forgets the groups; each one's gloo threads stop when its
        # last reference goes. A group still referenced from a reference cycle (a trial's
        # attribute: the trainer and the trial refer to each other) would keep them into the
        # interpreter's finalization, where a worker releasing its last tensors aborts the
        # process (StopAgreement.close says how): collect such cycles while Python runs.
        gc.collect()


def _distributed_context(strategy: Any) -> DistributedContext:
    if strategy.world_size == 1:
        return DummyDistributedContext()
    return DistributedContext(
        rank=strategy.global_rank,
        size=strategy.world_size,
        local_rank=strategy.local_rank,
        local_size=getattr(strategy, "num_processes", 1),
        cross_rank=strategy.node_rank,
        cross_size=getattr(strategy, "num_nodes", 1),
    )
