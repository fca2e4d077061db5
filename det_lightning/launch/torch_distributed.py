"""``python -m det_lightning.launch.torch_distributed [TORCH_OVERRIDES... --] python3 train.py``.

Determined's launcher starts torchrun on every node of a cluster trial; here it runs the script
as ``det-lightning run`` does (``import determined`` aliased to det_lightning), one process,
or one per device under torchrun when the overrides ask for several::

    python -m det_lightning.launch.torch_distributed --nproc_per_node 2 -- python3 train.py

Under ``compat.install()``, ``determined.launch.torch_distributed`` is this module, and an
experiment's ``entrypoint: python3 -m determined.launch.torch_distributed python3 train.py``
runs the same way.
"""

import argparse
import logging
import sys
from typing import List, Tuple

from det_lightning._refused import module_getattr

logger = logging.getLogger("det_lightning.launch.torch_distributed")

# Determined's cluster command builders (create_launch_cmd, ...) raise NotProvidedError.
__getattr__ = module_getattr(__name__)

# torchrun's flags that have a det-lightning launch option, either spelling.
_OVERRIDES = {
    "--nproc_per_node": "--devices",
    "--nproc-per-node": "--devices",
    "--nnodes": "--num-nodes",
}


class UsageError(ValueError):
    """An override det-lightning cannot honour, or no script to launch."""


def _launch_flags(override_args: List[str]) -> List[str]:
    """torchrun overrides as ``det-lightning run`` launch flags.

    >>> _launch_flags(["--nproc_per_node=2", "--nnodes", "1"])
    ['--devices', '2', '--num-nodes', '1']

    Raises:
        UsageError: an override with no det-lightning equivalent.
    """
    flags: List[str] = []
    words = list(override_args)
    while words:
        flag, _, value = words.pop(0).partition("=")
        if flag not in _OVERRIDES:
            raise UsageError(
                f"torch_distributed override {flag!r} is not supported locally; give "
                "--nproc_per_node N and --nnodes N, or run torchrun yourself: torchrun "
                "[OPTIONS] -m det_lightning run train.py."
            )
        if not value:
            if not words:
                raise UsageError(f"torch_distributed override {flag} needs a value.")
            value = words.pop(0)
        flags += [_OVERRIDES[flag], value]
    return flags


def parse_args(args: List[str]) -> Tuple[List[str], List[str]]:
    """``(override_args, script)`` from ``[OVERRIDES... --] SCRIPT...``, as Determined splits
    them (argparse exits with status 2 on a usage error).

    >>> parse_args(["--nproc_per_node", "2", "--", "python3", "train.py", "--lr", "1"])
    (['--nproc_per_node', '2'], ['python3', 'train.py', '--lr', '1'])
    """
    override_args: List[str] = []
    if "--" in args:
        split = args.index("--")
        override_args, args = args[:split], args[split + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m det_lightning.launch.torch_distributed",
        usage="%(prog)s [[TORCH_OVERRIDES...] --] SCRIPT...",
        description="Run a training script as `det-lightning run` does.",
    )
    parser.add_argument("--trial", help=argparse.SUPPRESS)
    parser.add_argument("script", metavar="SCRIPT...", nargs=argparse.REMAINDER)
    parsed = parser.parse_args(args)
    if parsed.trial is not None:
        parser.error(
            f"--trial {parsed.trial} (a legacy Trial entrypoint, deprecated in Determined 0.38) "
            "runs with `det-lightning experiment CONFIG.yaml MODEL_DIR` and "
            f"entrypoint: {parsed.trial}."
        )
    if not parsed.script:
        parser.error("empty script is not allowed")
    return override_args, list(parsed.script)


def main(override_args: List[str], script: List[str]) -> int:
    """Runs ``script`` (``python3 train.py ARGS`` or ``train.py ARGS``) as ``det-lightning run``.

    Returns:
        The exit status: the script's, 2 for an unsupported override or a non-Python script.
    """
    from det_lightning import errors
    from det_lightning._runner import cli, harness

    try:
        flags = _launch_flags(override_args or [])
        target = harness.parse_command(script)
    except (UsageError, errors.InvalidConfigException) as e:
        print(f"torch_distributed: error: {e}", file=sys.stderr)
        return cli.EXIT_USAGE
    if isinstance(target, str):  # `python3 -m determined.launch.X --trial model_def:Trial`
        print(
            f"torch_distributed: error: {target!r} is a legacy Trial entrypoint; run it with "
            "`det-lightning experiment CONFIG.yaml MODEL_DIR`.",
            file=sys.stderr,
        )
        return cli.EXIT_USAGE
    logger.debug("launching: det-lightning run %s", " ".join([*flags, *target]))
    return cli.main(["run", *flags, *target])


if __name__ == "__main__":
    sys.exit(main(*parse_args(sys.argv[1:])))
