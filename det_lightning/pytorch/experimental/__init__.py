"""``determined.pytorch.experimental``: ``torch_batch_process``, batch inference over a dataset
sharded across the job's processes, with its progress checkpointed."""

from det_lightning.pytorch.experimental._torch_batch_process import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
    get_default_device,
    torch_batch_process,
)

__all__ = [
    "TorchBatchProcessor",
    "TorchBatchProcessorContext",
    "get_default_device",
    "torch_batch_process",
]
