"""The trial of Determined's MNIST tutorial in its ``model_def.py`` form (releases before
0.26.4: ``entrypoint: model_def:MNistTrial``, hyperparameters read with
``context.get_hparam``), with a learning-rate scheduler and a shuffled training loader added so
that the example exercises them, and one import line changed: with Determined this file starts
``from determined import pytorch``; here it is ``from det_lightning import pytorch``.

Determined 0.38.1's tutorial moved the trial into ``train.py`` as ``MNistTrial(context,
hparams)`` with the model in ``model.py``; det_lightning runs that form unchanged too (its
``load_trial_from_checkpoint_path`` then needs ``trial_kwargs={"hparams": ...}``, as
Determined's does).
"""

from typing import Any, Dict

import data
import torch
from torch import nn

from det_lightning import pytorch


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size(0), -1)


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.batch_size = self.context.get_per_slot_batch_size()
        self.model = self.context.wrap_model(
            nn.Sequential(
                nn.Conv2d(1, self.context.get_hparam("n_filters1"), 3, 1),
                nn.ReLU(),
                nn.Conv2d(
                    self.context.get_hparam("n_filters1"),
                    self.context.get_hparam("n_filters2"),
                    3,
                    1,
                ),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Dropout2d(self.context.get_hparam("dropout1")),
                Flatten(),
                nn.Linear(144 * self.context.get_hparam("n_filters2"), 128),
                nn.ReLU(),
                nn.Dropout(self.context.get_hparam("dropout2")),
                nn.Linear(128, 10),
                nn.LogSoftmax(dim=1),
            )
        )
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.Adadelta(
                self.model.parameters(), lr=self.context.get_hparam("learning_rate")
            )
        )
        self.scheduler = self.context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.9),
            step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH,
        )

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            data.get_dataset(train=True), batch_size=self.batch_size, shuffle=True
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(data.get_dataset(train=False), batch_size=self.batch_size)

    def train_batch(
        self, batch: pytorch.TorchData, epoch_idx: int, batch_idx: int
    ) -> Dict[str, torch.Tensor]:
        images, labels = batch
        output = self.model(images)
        loss = torch.nn.functional.nll_loss(output, labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData) -> Dict[str, Any]:
        images, labels = batch
        output = self.model(images)
        validation_loss = torch.nn.functional.nll_loss(output, labels).item()
        pred = output.argmax(dim=1, keepdim=True)
        accuracy = pred.eq(labels.view_as(pred)).sum().item() / len(images)
        return {"validation_loss": validation_loss, "accuracy": accuracy}
