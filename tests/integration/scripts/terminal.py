"""Trains the fixture MLPTrial as Determined's example scripts do, for tests that read the terminal.

Usage: ``python terminal.py [--devices N] [--no-basic-config]``, in a scratch directory (the
checkpoints and TensorBoard files go under it). The script logs a line of its own at batch 5.
"""

import argparse
import logging
import pathlib
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import det_lightning as det  # noqa: E402
from det_lightning import pytorch  # noqa: E402
from tests.fixtures.trials import make_trials, seed_everything  # noqa: E402


def script_line() -> Any:
    """A Lightning callback logging one line through the script's own logger while the
    progress bar is drawn. Lightning is imported after ``basicConfig``, as in the example."""
    import lightning.pytorch as pl

    class ScriptLine(pl.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == 5 and trainer.is_global_zero:
                logging.getLogger("terminal_script").warning("a line from the script at batch 5")

    return ScriptLine()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-basic-config", action="store_true")
    pytorch.add_launch_arguments(parser)
    args = parser.parse_args()
    if not args.no_basic_config:  # as Determined's examples do
        logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    seed_everything(1)
    with pytorch.init(hparams={"lr": 0.01, "n": 96}, **pytorch.launch_kwargs(args)) as context:
        trial = make_trials(pytorch)["MLPTrial"](context)
        trainer = pytorch.Trainer(trial, context, callbacks=[script_line()])
        trainer.fit(
            max_length=pytorch.Batch(12),
            reporting_period=pytorch.Batch(3),
            validation_period=pytorch.Batch(6),
            checkpoint_period=pytorch.Batch(6),
        )


if __name__ == "__main__":
    main()
