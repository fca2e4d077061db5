"""One deterministic training run on the GPU, in a process of its own; the weights, losses and
validation metrics go to a file for ``test_deterministic.py`` to compare bit for bit.

    python -m tests.gpu.deterministic_child {det_lightning|determined} OUT.pt [--no-mode]

The trial has convolutions (cuDNN), dropout (the CUDA generator) and a shuffled loader. Under
det_lightning deterministic mode is ``init(deterministic=True)``; under the real Determined,
which has no such mode, the same torch settings are made here before anything is built.
"""

import os
import sys
from typing import Any, Dict, List

import torch
from torch import nn
from torch.utils import data


def make_trial(pytorch: Any) -> Any:
    class ConvTrial(pytorch.PyTorchTrial):
        def __init__(self, context: Any) -> None:
            self.context = context
            self.model = context.wrap_model(
                nn.Sequential(
                    nn.Conv2d(3, 16, 3, padding=1),
                    nn.BatchNorm2d(16),
                    nn.ReLU(),
                    nn.Conv2d(16, 32, 3, stride=2, padding=1),
                    nn.ReLU(),
                    nn.Dropout(0.3),
                    nn.AdaptiveAvgPool2d(1),
                    nn.Flatten(),
                    nn.Linear(32, 10),
                )
            )
            self.opt = context.wrap_optimizer(
                torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
            )
            self.losses: List[torch.Tensor] = []

        def _data(self, n: int, seed: int) -> data.Dataset:
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(n, 3, 16, 16, generator=g)
            return data.TensorDataset(x, torch.randint(0, 10, (n,), generator=g))

        def build_training_data_loader(self) -> Any:
            return pytorch.DataLoader(self._data(256, 0), batch_size=32, shuffle=True)

        def build_validation_data_loader(self) -> Any:
            return pytorch.DataLoader(self._data(64, 1), batch_size=32)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = nn.functional.cross_entropy(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            self.losses.append(loss.detach())
            return {"loss": loss}

        def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
            x, y = batch
            return {"validation_loss": nn.functional.cross_entropy(self.model(x), y)}

    return ConvTrial


def main(which: str, out: str, mode: bool) -> None:
    if which == "determined":
        from determined import pytorch

        if mode:  # what det_lightning's init(deterministic=True) does, by hand
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True
        init_kwargs: Dict[str, Any] = {}
    else:
        from det_lightning import pytorch  # type: ignore[no-redef]

        init_kwargs = {"deterministic": mode}
    torch.manual_seed(5)
    with pytorch.init(hparams={}, **init_kwargs) as context:
        trial = make_trial(pytorch)(context)
        validations: List[Dict[str, Any]] = []

        class Keep(pytorch.PyTorchCallback):
            def on_validation_end(self, metrics: Dict[str, Any]) -> None:
                validations.append({k: float(v) for k, v in metrics.items()})

        trial.build_callbacks = lambda: {"keep": Keep()}
        pytorch.Trainer(trial, context).fit(
            max_length=pytorch.Batch(24),
            validation_period=pytorch.Batch(12),
            checkpoint_policy="none",
        )
    assert str(next(trial.model.parameters()).device).startswith("cuda")
    torch.save(
        {
            "state": {k: v.cpu() for k, v in trial.model.state_dict().items()},
            "losses": torch.stack(trial.losses).cpu(),
            "validations": validations,
        },
        out,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--no-mode" not in sys.argv[3:])
