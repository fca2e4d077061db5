"""Launch options: Lightning's ``accelerator``, ``devices``, ``num_nodes``, ``strategy`` and
``precision``, from a script's command line to ``init()``.

Two lines make a script launchable on several devices::

    parser = argparse.ArgumentParser()
    det_lightning.pytorch.add_launch_arguments(parser)     # --devices, --num-nodes, ...
    args = parser.parse_args()
    with det_lightning.pytorch.init(hparams=..., **det_lightning.pytorch.launch_kwargs(args)):
        ...

Then ``python train.py --devices 2`` trains on two processes (Lightning re-runs the script for
the second one), and ``torchrun --nproc_per_node=2 train.py`` or SLURM work unchanged. Options
left out keep Lightning's defaults (``"auto"``, one node, DDP when there are several devices).

This module never imports Lightning; ``start()`` hands over to ``det_lightning.adapters.launch``.
The resolved options, ``LaunchOptions``, are a value in ``_launch_options.py``.
"""

import argparse
import os
from typing import Any, Dict, Mapping, Optional, Union

from det_lightning.core import DistributedContext
from det_lightning.pytorch._launch_options import LAUNCH_OPTIONS, Launched

# Launch options can also come from the environment (``det-lightning run --devices 2 train.py``
# sets these for an unmodified script); arguments to init() win over them.
LAUNCH_ENV = {name: f"DET_LIGHTNING_{name.upper()}" for name in LAUNCH_OPTIONS}


def _parse_env_value(name: str, text: str) -> Any:
    """``"2"`` -> 2 for counts; ``"0,1"`` -> [0, 1] for device lists; ``"1"``/``"true"`` ->
    True for the ``deterministic`` switch; other text as given."""
    if name == "deterministic":
        return text.strip().lower() in ("1", "true", "yes", "on")
    if name in ("devices", "num_nodes") and text.lstrip("-").isdigit():
        return int(text)
    if name == "devices" and "," in text:
        return [int(part) for part in text.split(",") if part.strip()]
    return text


def options_from_environ(environ: Mapping[str, str]) -> Dict[str, Any]:
    """The launch options set through ``DET_LIGHTNING_<OPTION>`` variables.

    >>> options_from_environ({"DET_LIGHTNING_DEVICES": "2", "DET_LIGHTNING_PRECISION": "bf16-mixed"})
    {'devices': 2, 'precision': 'bf16-mixed'}
    """
    return {
        name: _parse_env_value(name, environ[var])
        for name, var in LAUNCH_ENV.items()
        if environ.get(var)
    }


def _devices(text: str) -> Union[int, str]:
    """``--devices`` as Lightning reads it: a count, ``auto``, ``-1`` or a list like ``0,2``.

    >>> _devices("2"), _devices("auto"), _devices("0,2")
    (2, 'auto', '0,2')
    >>> _devices("abc")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 'abc' is not a device count (2), -1 for all, auto, or a list of \
device indices (0,1)

    Raises:
        argparse.ArgumentTypeError: none of those (argparse prints it as a usage error).
    """
    stripped = text.strip()
    if stripped.lstrip("-").isdigit() and (int(stripped) == -1 or int(stripped) > 0):
        return int(stripped)
    parts = [part.strip() for part in stripped.split(",")]
    if stripped == "auto" or ("," in stripped and all(p.isdigit() for p in parts if p)):
        return stripped
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a device count (2), -1 for all, auto, or a list of device indices (0,1)"
    )


def _positive_int(text: str) -> int:
    """``--num-nodes``: a count > 0.

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of nodes > 0")
    return int(text)


def add_launch_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Adds ``--accelerator``, ``--devices``, ``--num-nodes``, ``--strategy``, ``--precision``
    and ``--deterministic`` (Lightning's ``Trainer`` arguments of those names) to ``parser``;
    pass the parsed arguments to ``init()`` with ``**launch_kwargs(args)``.

    >>> args = add_launch_arguments(argparse.ArgumentParser()).parse_args(["--devices", "2"])
    >>> launch_kwargs(args)
    {'devices': 2}
    """
    group = parser.add_argument_group("launch (Lightning Trainer options; default: Lightning's)")
    group.add_argument(
        "--accelerator", default=None, help="cpu, gpu, cuda, mps, tpu or auto (default: auto)"
    )
    group.add_argument(
        "--devices",
        type=_devices,
        default=None,
        help="devices per node: a count, -1 for all, or a list like 0,1 (default: auto); "
        "with more than one, Lightning runs this script once per device",
    )
    group.add_argument(
        "--num-nodes",
        "--num_nodes",
        dest="num_nodes",
        type=_positive_int,
        default=None,
        help="number of nodes; run the script on each (SLURM, torchrun, or NODE_RANK/MASTER_ADDR)",
    )
    group.add_argument(
        "--strategy",
        default=None,
        help="ddp (the default with several devices), ddp_find_unused_parameters_true, fsdp, "
        "deepspeed_stage_2, ...",
    )
    group.add_argument(
        "--precision", default=None, help="32-true (default), 16-mixed, bf16-mixed, 64-true, ..."
    )
    group.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="deterministic algorithms only (cuDNN, cuBLAS), set before CUDA starts: the same "
        "weights run after run, at some cost in speed",
    )
    return parser


def launch_kwargs(args: Any) -> Dict[str, Any]:
    """The launch options in ``args`` (from ``add_launch_arguments``) that were given, as
    keyword arguments for ``init()``."""
    given = {name: getattr(args, name, None) for name in LAUNCH_OPTIONS}
    return {name: value for name, value in given.items() if value is not None}


def external_topology(
    distributed: Optional[DistributedContext], environ: Mapping[str, str]
) -> Dict[str, int]:
    """``devices`` and ``num_nodes`` of processes started outside Lightning: a
    ``DistributedContext`` the user built, or torchrun's environment. Lightning insists that
    they match the world size; its own default (``devices="auto"``) counts local devices.

    >>> external_topology(None, {"TORCHELASTIC_RUN_ID": "1", "LOCAL_WORLD_SIZE": "2",
    ...                          "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2"})
    {'devices': 2, 'num_nodes': 2}
    >>> external_topology(None, {})
    {}
    """
    if distributed is not None:
        return {"devices": distributed.local_size, "num_nodes": distributed.cross_size}
    if "TORCHELASTIC_RUN_ID" in environ and "LOCAL_WORLD_SIZE" in environ:
        local = int(environ["LOCAL_WORLD_SIZE"])
        world = int(environ.get("WORLD_SIZE", local))
        nodes = int(environ.get("GROUP_WORLD_SIZE", max(world // local, 1)))
        return {"devices": local, "num_nodes": nodes}
    return {}


def resolve_options(
    options: Mapping[str, Any],
    distributed: Optional[DistributedContext],
    environ: Mapping[str, str],
) -> Dict[str, Any]:
    """The launch options given, with ``devices``/``num_nodes`` filled in from processes started
    outside Lightning; None means Lightning's default.

    >>> resolve_options({"devices": None, "strategy": "ddp"}, None, {})
    {'strategy': 'ddp'}
    """
    given = {name: value for name, value in options.items() if value is not None}
    unknown = set(given) - set(LAUNCH_OPTIONS)
    if unknown:
        raise TypeError(f"Unknown launch options {sorted(unknown)}; expected {LAUNCH_OPTIONS}.")
    given = {**options_from_environ(environ), **given}
    implied = external_topology(distributed, environ)
    return {**{k: v for k, v in implied.items() if k not in given}, **given}


def start(options: Mapping[str, Any], distributed: Optional[DistributedContext]) -> Launched:
    """Starts this job's processes (or joins those torchrun/SLURM started) and their process
    group, before the trial is built. See ``det_lightning.adapters.launch``."""
    from det_lightning.adapters.launch import start_processes

    return start_processes(resolve_options(options, distributed, os.environ), distributed)
