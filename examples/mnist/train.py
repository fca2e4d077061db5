"""Train the MNIST trial locally: Determined's Trainer-API script with one import changed.

python train.py                            # 1 epoch on generated data
python train.py --epochs 3
python train.py --devices 2 --accelerator cpu     # Lightning launches 2 processes (DDP)
torchrun --nproc_per_node=2 train.py       # or let torchrun launch them
python train.py --latest-checkpoint latest # continue from the newest checkpoint
det-lightning experiment adaptive.yaml .   # an adaptive_asha search: each trial runs this
                                           # script, which takes its cluster branch
"""

import argparse
import logging

import model_def

import det_lightning as det
from det_lightning import pytorch

HPARAMS = {
    "learning_rate": 1.0,
    "n_filters1": 16,
    "n_filters2": 32,
    "dropout1": 0.25,
    "dropout2": 0.5,
    "global_batch_size": 64,
}


def main(epochs: int, latest_checkpoint: str = None, **launch: object) -> None:
    info = det.get_cluster_info()
    hparams = HPARAMS
    if info is not None:  # a trial of a search: its hyperparameters, and its checkpoint
        hparams = {**HPARAMS, **info.trial.hparams}
        latest_checkpoint = latest_checkpoint or info.latest_checkpoint
    with pytorch.init(hparams=hparams, **launch) as train_context:
        trial = model_def.MNistTrial(train_context)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(
            max_length=pytorch.Epoch(epochs),
            validation_period=pytorch.Batch(32),
            checkpoint_period=pytorch.Epoch(1),
            reporting_period=pytorch.Batch(16),
            latest_checkpoint=latest_checkpoint,
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--latest-checkpoint",
        default=None,
        help="a checkpoint directory, its UUID, or 'latest' to resume",
    )
    pytorch.add_launch_arguments(parser)  # --devices 2, --num-nodes, --strategy, ...
    args = parser.parse_args()
    main(args.epochs, args.latest_checkpoint, **pytorch.launch_kwargs(args))
