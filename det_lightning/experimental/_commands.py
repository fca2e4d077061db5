"""``det-lightning experiment activate|pause|cancel|kill|delete ID``: the client's
``Experiment.activate()``, ``pause()``, ``cancel()``, ``kill()`` and ``delete()`` from the
shell, as Determined's ``det experiment activate|pause|cancel|kill|delete`` (``delete`` asks
first, as Determined's does, unless given ``--yes``)."""

import argparse
import sys
from typing import List

ACTIONS = ("activate", "pause", "cancel", "kill", "delete")

_HELP = {
    "activate": "Continue a paused or canceled experiment: its command, from its record, in a "
    "process of its own (its output: client-<time>.log beside its checkpoints). One paused "
    "while it ran continues once its trials have stopped (this waits for them).",
    "pause": "Pause an experiment: PAUSED at once. One running, on this machine or any other "
    "sharing its checkpoint directory, stops its trials with a checkpoint (within seconds) "
    "and its command exits 1; activate, or a rerun of its command, continues it.",
    "cancel": "Cancel an experiment: CANCELED, terminal (activate, or a rerun of its command, "
    "continues it). One running, on this machine or any other sharing its checkpoint "
    "directory, is STOPPING_CANCELED until its process stops its trials with a checkpoint "
    "(within seconds) and exits 1.",
    "kill": "As cancel (STOPPING_KILLED while it stops; its trials still checkpoint).",
    "delete": "Delete an experiment in a terminal state: its folder (checkpoints, trials' "
    "files, record), its studies in --storage, its TensorBoard files.",
}


def _parser(action: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"det-lightning experiment {action}", description=_HELP[action]
    )
    parser.add_argument("id", help="the experiment id (`det-lightning experiment list`)")
    parser.add_argument("--checkpoint-dir", default=None, help="where the experiments are")
    parser.add_argument(
        "--storage",
        default=None,
        help="its search storage's database URL with the password (its record names the "
        "storage it began with, a password left out)",
    )
    if action == "delete":
        parser.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    return parser


def main(action: str, argv: List[str]) -> int:
    """Runs ``det-lightning experiment ACTION ARGV``; returns the exit status (1: refused,
    not found, or not confirmed)."""
    from det_lightning.experimental._determined import Determined
    from det_lightning.experimental._values import NotFoundException

    args = _parser(action).parse_args(argv)
    said = f"det-lightning experiment {action}"
    try:
        experiment = Determined(
            checkpoint_dir=args.checkpoint_dir, storage=args.storage
        ).get_experiment(args.id)
        if action == "delete" and not args.yes and not _confirmed(experiment.id):
            print(f"{said}: not deleted.", file=sys.stderr)
            return 1
        getattr(experiment, action)()
    except (NotFoundException, ValueError, OSError) as e:
        print(f"{said}: error: {e}", file=sys.stderr)
        return 1
    state = experiment.state.name if experiment.state else "unknown"
    print(f"experiment {experiment.id}: {state}")
    return 0


def _confirmed(experiment_id: str) -> bool:
    """Whether the user answers yes (a standard input that is no terminal cannot: --yes)."""
    if not sys.stdin.isatty():
        print(
            f"det-lightning experiment delete: deleting {experiment_id} needs a yes: pass --yes "
            "(standard input is not a terminal to ask on).",
            file=sys.stderr,
        )
        return False
    try:
        answer = input(
            f"Deleting experiment {experiment_id} removes its checkpoints and files for good. "
            "Delete it? [y/N] "
        )
    except (EOFError, KeyboardInterrupt):  # Ctrl+D, Ctrl+C: no
        print(file=sys.stderr)
        return False
    return answer.strip().lower() in ("y", "yes")


__all__ = ["ACTIONS", "main"]
