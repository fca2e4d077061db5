"""The ``det-lightning`` command (also ``python -m det_lightning``).

Usage::

    det-lightning run [LAUNCH] [--resume] train.py [ARGS ...]   # a Trainer-API script, unmodified
    det-lightning run [LAUNCH] [--resume] -m package.module [ARGS ...]
    det-lightning experiment [create] [LAUNCH] [--checkpoint-dir DIR] [--storage URL]
                             [--workers N] [--dashboard] CONFIG.yaml MODEL_DIR
    det-lightning checkpoint {export,convert} ...         # see det_lightning.pytorch._export
    det-lightning check [DIR|CONFIG ...]                  # would each project run? (_check)
    det-lightning experiment list [--checkpoint-dir DIR]  # and `experiment describe ID`,
    det-lightning checkpoint list [ID] [--checkpoint-dir DIR]   # from the files (_bookkeeping)
    det-lightning experiment activate|pause|cancel|kill|delete ID   # the client's (_commands)

Code run by ``run`` and ``experiment`` gets ``det_lightning`` when it imports ``determined``
(``det_lightning.compat``).

``LAUNCH`` is Lightning's ``--accelerator``, ``--devices``, ``--num-nodes``, ``--strategy`` and
``--precision``, given before the script or config. ``experiment`` passes them to ``init()``
(``--devices`` defaults to ``resources.slots_per_trial``). ``run`` puts them in the script's
environment as ``$DET_LIGHTNING_<OPTION>``. With ``--devices N`` (N > 1) ``run`` starts N
processes of itself under torchrun, whose environment ``init()`` reads (Lightning's own launcher
would re-run the bare script, without the ``determined`` alias); ``experiment`` runs once and
starts each trial's N processes under a torchrun of the trial's own (``search._jobs``), so a
search's worker is never a rank.

Exit status: ``_cli_text.EPILOG``, the end of every ``--help`` (0, 1, 2, 75; ``run``: the
script's). After a signal the message says the command that continues: for ``experiment``
the same command, which prints its summary first, the interrupted trial INTERRUPTED; for
``run`` the command with ``--resume``.
"""

import argparse
import contextlib
import os
import pathlib
import runpy
import shlex
import socket
import subprocess
import sys
from typing import Any, Callable, ContextManager, List, Mapping, Optional, Sequence

from det_lightning import compat, errors
from det_lightning._env import (
    CHIEF_PORT_ENV,
    ERROR_LOG_ENV,
    LATEST_CHECKPOINT_ENV,
    ONCE_PER_NODE_ENV,
    RELAUNCH_ENV,
    RESUME_ADVICE_ENV,
    SEARCH_ENV,
)
from det_lightning._runner import _check, _launch_checks, _overrides, _torchrun
from det_lightning._runner._cli_experiment import check_experiment_launch, cmd_experiment
from det_lightning._runner._cli_text import (
    EPILOG,
    EXIT_FAILURE,
    EXIT_USAGE,
    PROG,
    CommandParser,
    print_error,
    version_text,
)
from det_lightning._runner._launch_checks import already_launched, launch_options
from det_lightning._runner.plan import UsageError
from det_lightning.pytorch import _export
from det_lightning.pytorch._launch import LAUNCH_ENV, add_launch_arguments


def torchrun_command(
    options: Mapping[str, Any], environ: Mapping[str, str], argv: Sequence[str]
) -> Optional[List[str]]:
    """``det-lightning ARGV`` under torchrun, one process per device; None when this process is
    already one of them, or one is enough.

    Lightning would start the other processes by re-running ``sys.argv``, which inside ``run``
    is the user's script without the ``determined`` alias; torchrun re-runs ``det-lightning``.

    >>> torchrun_command({"devices": 2}, {}, ["run", "train.py"])[2:]
    ['det_lightning._runner._torchrun', '--nproc-per-node=2', '--standalone', '-m', \
'det_lightning', 'run', 'train.py']
    >>> torchrun_command({"devices": 2}, {"LOCAL_RANK": "1"}, ["run", "train.py"]) is None
    True

    Raises:
        UsageError: several nodes, without ``MASTER_ADDR`` and ``NODE_RANK`` to meet at.
    """
    devices = options.get("devices")
    if not isinstance(devices, int) or devices <= 1 or already_launched(environ):
        return None
    nodes = options.get("num_nodes") or 1
    rendezvous: Sequence[str] = _torchrun.STANDALONE
    if nodes > 1:
        missing = [name for name in ("MASTER_ADDR", "NODE_RANK") if name not in environ]
        if missing:
            raise UsageError(
                f"--num-nodes {nodes} needs {' and '.join(missing)} in the environment (the "
                "first node's address, and this node's rank) to start this node's processes; "
                "or start them yourself with torchrun -m det_lightning ... on every node."
            )
        rendezvous = [
            f"--nnodes={nodes}",
            f"--node-rank={environ['NODE_RANK']}",
            f"--master-addr={environ['MASTER_ADDR']}",
            f"--master-port={environ.get('MASTER_PORT', '29500')}",
        ]
    # torchrun, without its traceback when a signal stops it
    return _torchrun.command(devices, rendezvous, "det_lightning", argv)


def _start_processes(
    options: Mapping[str, Any], argv: Sequence[str], source: str = "--devices "
) -> Optional[int]:
    """Runs ``det-lightning ARGV`` once per device under torchrun and returns its exit status,
    or None to go on in this process; ``source``: where the device count came from."""
    command = torchrun_command(options, os.environ, argv)
    if command is None:
        return None
    _launch_checks.warn_if_oversubscribed(options, f"{source}{options['devices']}")
    print(
        f"{PROG}: starting {options['devices']} processes: {' '.join(command[1:])}",
        file=sys.stderr,
        flush=True,
    )
    return subprocess.call(command)


def _defer_processes(options: Mapping[str, Any], argv: Sequence[str]) -> None:
    """A command trial that runs once per node (``$DET_LIGHTNING_ONCE_PER_NODE``): the
    script runs in this process, and the torchrun command that would have started it once per
    device waits for its first ``init()`` (``_relaunch``); a worker the script starts itself
    meets its chief at a free port (``DistributedContext(chief_ip=...)``)."""
    from det_lightning import _relaunch

    command = torchrun_command(options, os.environ, argv)
    if command is None:
        return
    _launch_checks.warn_if_oversubscribed(options, f"--devices {options['devices']}")
    os.environ[RELAUNCH_ENV] = _relaunch.plan(os.getpid(), options["devices"], command)
    _relaunch.shield_from_first_signal()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        os.environ[CHIEF_PORT_ENV] = str(probe.getsockname()[1])


# ----- run -----------------------------------------------------------------------------------


def run_script(target: str, script_args: List[str], as_module: bool = False) -> int:
    """Runs a script (or ``-m`` module) as ``__main__`` with ``determined`` aliased.

    ``sys.argv`` and ``sys.path[0]`` are what ``python train.py ARGS`` would give the script.

    A ``python3`` the script starts is this installation's and imports det_lightning as
    ``determined`` too (``_stand_in``), as it would find Determined where Determined ran.

    Returns:
        0 when the script returns; its ``sys.exit`` status propagates as ``SystemExit``.
    """
    from det_lightning._runner._stand_in import child_environment

    compat.install()
    os.environ.update(child_environment(os.environ))
    if as_module:
        # runpy needs a real module spec: `-m determined.launch.torch_distributed` runs ours.
        target = compat.module_name(target)
        sys.argv = [target, *script_args]
        sys.path[0:1] = [os.getcwd()]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return 0
    path = os.path.abspath(target)
    sys.argv = [target, *script_args]
    sys.path[0:1] = [os.path.dirname(path)]
    runpy.run_path(path, run_name="__main__")
    return 0


def _search_reporting() -> ContextManager[None]:
    """A search's trial (``$DET_LIGHTNING_SEARCH``): its ``fit()`` reports to the search."""
    if not os.environ.get(SEARCH_ENV):
        return contextlib.nullcontext()
    from det_lightning._runner.search._child import reporting_to_search  # imports optuna

    return reporting_to_search()


def _cmd_run(args: argparse.Namespace) -> int:
    if not args.module and not os.path.isfile(args.target):
        print_error("run", f"can't open file {args.target!r}: no such file.")
        return EXIT_USAGE
    options = launch_options(args)
    try:
        if os.environ.get(ONCE_PER_NODE_ENV) and not already_launched(os.environ):
            _defer_processes(options, args.argv)
            status = None
        else:
            status = _start_processes(options, args.argv)
    except UsageError as e:
        print_error("run", str(e))
        return EXIT_USAGE
    if status is not None:
        return status
    for name, value in options.items():
        os.environ[LAUNCH_ENV[name]] = str(value)
    if args.resume:
        os.environ[LATEST_CHECKPOINT_ENV] = "latest"
    # After a signal, the command that continues: this one, with --resume.
    again = args.argv if args.resume else ["run", "--resume", *args.argv[1:]]
    os.environ.setdefault(RESUME_ADVICE_ENV, f"To continue, run: {PROG} {shlex.join(again)}")
    try:
        with _search_reporting():
            return run_script(args.target, args.script_args, as_module=args.module)
    except errors.InvalidHP as e:
        if not os.environ.get(SEARCH_ENV):
            raise
        # A search's trial: tell the search, and exit 0 as Determined's harness does.
        from det_lightning._runner.search._child import report_invalid_hp

        print(f"{PROG} run: InvalidHP: {e.msg}", file=sys.stderr, flush=True)
        report_invalid_hp(e.msg)
        return 0
    except Exception as e:
        _log_error(e)
        raise


def _log_error(error: Exception) -> None:
    """A search's command trial (``$DET_LIGHTNING_ERROR_LOG``): appends the script's traceback
    to the trial's error.log, which the search's failure line points at."""
    path = os.environ.get(ERROR_LOG_ENV)
    if not path or type(error).__name__ == "LeaseLost":  # not the trial's error: its takeover
        return
    from det_lightning._runner._failure import append_traceback

    rank = os.environ.get("RANK", "0")
    try:
        append_traceback(pathlib.Path(path), f"the trial's process (rank {rank}) raised", error)
    except OSError:
        pass  # the traceback still reaches the console, as it propagates


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


# ----- checkpoint ----------------------------------------------------------------------------


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    return _export.main([args.action, *args.rest])


# ----- parser and main -----------------------------------------------------------------------


# ``experiment ACTION ID``: the client's (``det_lightning.experimental._commands.ACTIONS``,
# named here so that --help imports no client).
EXPERIMENT_ACTIONS = ("activate", "pause", "cancel", "kill", "delete")


def build_parser() -> argparse.ArgumentParser:
    """The ``det-lightning`` argument parser."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run Determined PyTorchTrial projects, unmodified, on PyTorch Lightning.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(
        dest="command",
        metavar="COMMAND",
        required=True,
        parser_class=CommandParser,
    )

    run = commands.add_parser(
        "run",
        help="run a Trainer-API script with `import determined` aliased to det_lightning",
        description="Run a Trainer-API script (python train.py ARGS) with `import determined` "
        "resolving to det_lightning. Launch options go before the script.",
    )
    add_launch_arguments(run)
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue from this run's latest checkpoint in the checkpoint directory (as "
        "DET_LIGHTNING_LATEST_CHECKPOINT=latest; a fresh start if there is none). Only a "
        "checkpoint of the same trial class and hyperparameters counts",
    )
    run.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="SCRIPT is a module to run, as with python -m",
    )
    run.add_argument("target", metavar="SCRIPT", help="the script (or module, with -m)")
    script_args = run.add_argument(
        "script_args", metavar="ARGS", nargs=argparse.REMAINDER, help="arguments for the script"
    )
    script_args.required = False  # argparse counts a REMAINDER as required: SCRIPT is
    run.set_defaults(handler=_cmd_run)

    experiment = commands.add_parser(
        "experiment",
        help="run a Determined experiment config locally",
        description="Run a Determined experiment config locally (`experiment list`, "
        "`experiment describe ID` show the experiments under a checkpoint directory; "
        "`experiment activate|pause|cancel|kill|delete ID` as Determined's): every "
        "searcher (single: a "
        "search of one trial) on Optuna. The experiment's id is its name and a hash of its "
        "name, hyperparameters, searcher and entrypoint: trial n checkpoints to "
        "<checkpoint dir>/<id>/trial-<n>/ and rerunning the same command continues the "
        "experiment (an interrupted or failed trial resumes from its own latest checkpoint; "
        "several workers may share one through --storage; give a rerun the same --storage and "
        "--checkpoint-dir). To start over, change the name or `experiment delete ID`. Also "
        "spelled `experiment create CONFIG MODEL_DIR`.",
    )
    add_launch_arguments(experiment)
    experiment.add_argument(
        "--checkpoint-dir",
        default=None,
        help="where checkpoints go (default: checkpoint_storage, else "
        "$DET_LIGHTNING_CHECKPOINT_DIR, else ./checkpoints)",
    )
    experiment.add_argument(
        "--storage",
        default=None,
        help="grid, random, adaptive_asha: the Optuna storage every worker "
        "of the search "
        "shares (a database URL, or a journal file path; default: "
        "<checkpoint dir>/<experiment id>/search.journal). Rerun with the same one to "
        "continue a search (another is refused: it does not hold the search).",
    )
    experiment.add_argument(
        "--heartbeat-timeout",
        type=_positive_seconds,
        default=120.0,
        metavar="SECONDS",
        help="grid, random, adaptive_asha: a trial whose worker has not "
        "renewed its lease for this long (its machine died) is taken over "
        "by another worker and resumed from its latest checkpoint "
        "(default: 120)",
    )
    experiment.add_argument(
        "--workers",
        type=int,
        default=None,
        help="a search: how many trials run at once on this machine, "
        "each in a worker process (default: one per slots_per_trial GPUs, "
        "at most max_concurrent_trials; one on a machine without GPUs)",
    )
    experiment.add_argument(
        "--dashboard",
        action="store_true",
        help="start optuna-dashboard on the search's storage while it runs "
        "(and after, until Ctrl-C); needs pip install "
        "'det_lightning[dashboard]'",
    )
    experiment.add_argument(
        "--config",
        dest="config_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=_overrides.HELP,
    )
    experiment.add_argument("config", metavar="CONFIG", help="the experiment config (YAML)")
    experiment.add_argument("model_dir", metavar="MODEL_DIR", help="the model definition directory")
    experiment.set_defaults(handler=cmd_experiment)

    checkpoint = commands.add_parser(
        "checkpoint",
        help="list an experiment's checkpoints; Lightning .ckpt files to Determined "
        "checkpoints (export), and back (convert)",
        description="list [ID] [--checkpoint-dir DIR]: the experiments' checkpoints; "
        "export FILE.ckpt [--checkpoint-dir DIR] [--code DIR] [--trust]; "
        "convert CHECKPOINT_DIR FILE.ckpt [--trust]. `det-lightning checkpoint export --help` "
        "for more.",
    )
    # `list` is answered before this parser (main): it is named here for the usage line.
    checkpoint.add_argument("action", choices=("list", "export", "convert"))
    checkpoint.add_argument("rest", metavar="ARGS", nargs=argparse.REMAINDER)
    checkpoint.set_defaults(handler=_cmd_checkpoint)
    _check.add_parser(commands)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Runs ``det-lightning ARGV``.

    Returns:
        The exit status (see the module docstring).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["experiment", "create"]:  # Determined's spelling
        argv = ["experiment", *argv[2:]]
    if argv[:2] in (["experiment", "list"], ["experiment", "describe"], ["checkpoint", "list"]):
        from det_lightning._runner import _bookkeeping

        return _bookkeeping.main(" ".join(argv[:2]), argv[2:])
    if argv[:1] == ["experiment"] and argv[1:2] in [[a] for a in EXPERIMENT_ACTIONS]:
        from det_lightning.experimental import _commands

        return _commands.main(argv[1], argv[2:])
    args = build_parser().parse_args(argv)
    args.argv = argv
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except compat.RealDeterminedImportedError as e:
        print_error(args.command, str(e))
        return EXIT_FAILURE
    except errors.InvalidExperimentException as e:  # a search's trial cannot be ranked
        print_error(args.command, str(e))
        return EXIT_FAILURE
    except errors.TrialPreempted as e:
        if not e.reported:  # the trainer logged how to continue; else say it here, once
            print(f"{PROG} {args.command}: {e}", file=sys.stderr, flush=True)
        return errors.TrialPreempted.EXIT_CODE
    except RuntimeError as e:
        pool = sys.modules.get("det_lightning._runner.search._pool")  # imported with a database
        if pool is None or not isinstance(e, pool.ConnectionLimitReached):
            raise
        print_error(args.command, str(e))  # the database is full: its message names the fixes
        return EXIT_FAILURE


# Where tests (and earlier callers) find them.
_check_experiment_launch = check_experiment_launch
_launch_options = launch_options

__all__ = ["build_parser", "main", "run_script"]
