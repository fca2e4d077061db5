"""MNIST-shaped data generated on the spot: 28x28 single-channel images of 10 classes.

Each class is a fixed random stroke pattern; samples are that pattern, shifted by up to two
pixels, with noise. It needs no download and is learnable in a few hundred steps, so the
example trains offline. Swap in ``torchvision.datasets.MNIST`` for the real thing.
"""

import torch
from torch.utils.data import TensorDataset


def _templates(generator: torch.Generator) -> torch.Tensor:
    strokes = (torch.rand(10, 1, 28, 28, generator=generator) > 0.85).float()
    return torch.nn.functional.max_pool2d(strokes, 3, stride=1, padding=1)


def get_dataset(train: bool, size: int = 0) -> TensorDataset:
    """A deterministic dataset: the same images every call (train and validation differ)."""
    generator = torch.Generator().manual_seed(1234)
    templates = _templates(generator)
    generator.manual_seed(1 if train else 2)
    size = size or (4096 if train else 1024)
    labels = torch.randint(0, 10, (size,), generator=generator)
    shifts = torch.randint(-2, 3, (size, 2), generator=generator)
    images = torch.stack(
        [
            torch.roll(templates[c], shifts=(int(dy), int(dx)), dims=(1, 2))
            for c, (dy, dx) in zip(labels.tolist(), shifts.tolist())
        ]
    )
    images = images + 0.8 * torch.randn(images.shape, generator=generator)
    return TensorDataset((images - 0.1307) / 0.3081, labels)
