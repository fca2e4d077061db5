"""``det-lightning experiment CONFIG MODEL_DIR``: the command that runs an experiment config.

It plans the experiment (``plan``), refuses a launch that would start it more than once
(``check_experiment_launch``), starts a search's workers on this machine (one per
``resources.slots_per_trial`` GPUs, or ``--workers``), each a process of this same command
that takes trials until the search is done, and runs the plan (``experiment``); the process
that started the workers then prints the summary. ``cli`` parses the arguments.
"""

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from typing import List, Mapping, Optional, Sequence

import det_lightning
from det_lightning import compat, errors
from det_lightning._env import SEARCH_WORKER_ENV
from det_lightning._job_processes import is_chief, quiet_unless_chief
from det_lightning._runner import _launch_checks, _overrides
from det_lightning._runner._cli_text import EXIT_USAGE, PROG, print_error
from det_lightning._runner._launch_checks import already_launched, launch_options
from det_lightning._runner._record import (
    config_changes,
    last_config,
    recorded_config,
    write_launch,
)
from det_lightning._runner.config._experiment_config import announce_ignored
from det_lightning._runner.experiment import INTERRUPTED_NOTE, announce, run_experiment
from det_lightning._runner.plan import Plan, UsageError, plan_experiment
from det_lightning._runner.search._dashboard import dashboard_beside
from det_lightning._runner.search._interrupt import SearchInterrupt

logger = logging.getLogger("det_lightning")


def cmd_experiment(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format=det_lightning.LOG_FORMAT)
    quiet_unless_chief(os.environ)
    try:
        config = _overrides.load_with_overrides(args.config, args.config_overrides, announce=False)
        plan = plan_experiment(config, args.model_dir, launch_options(args), args.checkpoint_dir)
        plan.storage = args.storage
        plan.heartbeat_timeout = args.heartbeat_timeout
        # One dashboard: this command's, not its workers' nor its torchrun processes'.
        wanted = (
            args.dashboard
            and os.environ.get(SEARCH_WORKER_ENV) is None
            and not already_launched(os.environ)
        )
        with dashboard_beside(plan, wanted):
            return _run_plan(plan, args)
    except (errors.InvalidConfigException, NotImplementedError, UsageError) as e:
        # An override's error names its --config flag; the file's, the file.
        where = "" if str(e).startswith("--config ") else f"{args.config}: "
        print_error("experiment", f"{where}{e}")
        return EXIT_USAGE


def _run_plan(plan: Plan, args: argparse.Namespace) -> int:
    # The ignored keys are announced once: by the process that runs the job (its chief), or
    # by the one that starts a search's workers.
    announce = is_chief(os.environ) and os.environ.get(SEARCH_WORKER_ENV) is None
    if os.environ.get(SEARCH_WORKER_ENV) is None:
        # Before any worker: a rerun in a storage without the experiment's search is refused.
        from det_lightning._runner.search._storage import check_search_is_here  # Optuna's

        check_search_is_here(plan.storage, plan.checkpoint_root, plan.experiment_id)
        check_experiment_launch(plan, os.environ)
        note_config_changes(plan)
        try:  # what activate() continues it with
            write_launch(plan, relaunch_flags(args))
        except OSError:
            pass  # the record, written next, names the folder and the fix
        workers = _search_workers(plan, args.workers)
        if workers > 1:
            announce_ignored(plan.config.ignored_keys)
            return _run_workers(workers, plan, args.argv)
    check_experiment_launch(plan, os.environ)
    if plan.trial_class is not None:
        devices = plan.launch.get("devices")
        if isinstance(devices, int) and devices > 1 and announce:
            source = "--devices " if args.devices is not None else "resources.slots_per_trial: "
            _launch_checks.warn_if_oversubscribed(plan.launch, f"{source}{devices}")
        compat.install()  # model_def.py imports determined
    if announce:
        announce_ignored(plan.config.ignored_keys)
    return run_experiment(plan)


def note_config_changes(plan: Plan) -> None:
    """Says which keys of the config differ from those the experiment last ran with, when a
    rerun continues it with another config: its id comes from its name, hyperparameters,
    searcher and entrypoint only, so an edited config (periods, data, optimizations...)
    continues the experiment, its trials resuming from their checkpoints, where Determined
    made a new experiment of each ``create``."""
    before = last_config(plan.checkpoint_root)
    if before is None:
        return
    now = json.loads(json.dumps(recorded_config(plan), default=str))  # as the files keep it
    changed = config_changes(before, now)
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if changed[8:] else "")
        logger.warning(
            f"experiment {plan.experiment_id} continues, its trials resuming from their "
            f"checkpoints, with a config changed since it last ran: {shown}. To begin a new "
            "experiment instead, change its name."
        )


def relaunch_flags(args: argparse.Namespace) -> List[str]:
    """The command line's launch flags that ``activate()`` continues the experiment with
    (``--storage`` is the record's; ``--dashboard`` and ``--config`` are not launch flags: the
    record's config has the overrides).

    >>> parsed = argparse.Namespace(accelerator=None, devices=[0, 1], num_nodes=None,
    ...     strategy=None, precision=None, deterministic=True, heartbeat_timeout=90.0, workers=2)
    >>> relaunch_flags(parsed)
    ['--devices', '0,1', '--deterministic', '--heartbeat-timeout', '90.0', '--workers', '2']
    """
    flags: List[str] = []
    for name, value in launch_options(args).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags += [flag] if value else []
        elif isinstance(value, (list, tuple)):
            flags += [flag, ",".join(str(v) for v in value)]
        else:
            flags += [flag, str(value)]
    if args.heartbeat_timeout is not None:
        flags += ["--heartbeat-timeout", str(args.heartbeat_timeout)]
    if args.workers is not None:
        flags += ["--workers", str(args.workers)]
    return flags


def check_experiment_launch(plan: Plan, environ: Mapping[str, str]) -> None:
    """An experiment starts each trial's processes itself (torchrun, one per device, per
    trial: ``search._jobs``, or the command's ``det-lightning run``); it is refused where it
    is itself one of several processes, each of which would take trials of its own, and a
    trial class on several nodes.

    Raises:
        UsageError: saying how to start it instead.
    """
    if already_launched(environ) and environ.get(SEARCH_WORKER_ENV) is None:
        seen = [
            f"{name}={environ[name]}"
            for name in ("LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS")
            if name in environ
        ]
        raise UsageError(
            f"this experiment was started as one of several processes ({', '.join(seen)}: "
            f"torchrun, or SLURM tasks); start {PROG} experiment once per machine, without "
            "torchrun, in a SLURM job of one task: it starts each trial's processes itself "
            "(--devices N or resources.slots_per_trial)"
        )
    if plan.trial_class is not None and (plan.launch.get("num_nodes") or 1) > 1:
        raise UsageError(
            "an experiment's trial class trains on one node (--devices N); for several "
            "nodes, train it from a script with pytorch.init() and Trainer.fit(), started by "
            f"{PROG} run --num-nodes N on every node"
        )


def _search_workers(plan: Plan, asked: Optional[int]) -> int:
    """How many trials of a search run at once on this machine: ``--workers``, else one per
    ``resources.slots_per_trial`` GPUs (at most ``max_concurrent_trials`` and the search's
    trials: one for ``single``), else one."""
    if asked is not None:
        return max(int(asked), 1)
    slots = max(plan.config.resources_config.slots_per_trial, 1)
    gpus = _launch_checks.gpu_count()
    limit = min(plan.config.searcher_config.max_concurrent_trials, plan.search.max_trials)
    return max(min(gpus // slots, limit), 1)


def _run_workers(workers: int, plan: Plan, argv: Sequence[str]) -> int:
    """Starts ``workers`` processes of this command on one search (their own GPUs each); the
    first to start prints nothing more than the others, then this one prints the summary."""
    started = time.monotonic()  # the summary's wall time: the workers', not its own
    announce(plan)  # once, not once per worker
    slots = max(plan.config.resources_config.slots_per_trial, 1)
    gpus = _launch_checks.gpu_count()
    children = []
    for index in range(workers):
        env = dict(os.environ, **{SEARCH_WORKER_ENV: str(index)})
        if gpus:
            devices = range(index * slots, min((index + 1) * slots, gpus))
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
        children.append(subprocess.Popen([sys.executable, "-m", "det_lightning", *argv], env=env))
    print(f"{PROG}: {workers} workers share this search", file=sys.stderr, flush=True)
    with SearchInterrupt():  # a signal to the process group stops the workers; wait for them
        codes = [child.wait() for child in children]
    os.environ[SEARCH_WORKER_ENV] = "summary"  # every trial is done: this process only reports
    try:
        status = run_experiment(plan, started)
    finally:
        del os.environ[SEARCH_WORKER_ENV]
    preempted = errors.TrialPreempted.EXIT_CODE
    if preempted in codes and status != preempted:  # stopped between trials: none interrupted
        print(INTERRUPTED_NOTE, file=sys.stderr, flush=True)
    return max([status, *codes])


__all__ = ["check_experiment_launch", "cmd_experiment"]
