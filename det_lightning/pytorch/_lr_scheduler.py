"""``LRScheduler``: a torch scheduler plus when the trainer steps it."""

import enum
from typing import Any, Dict, List


class LRScheduler:
    """Wraps a ``torch.optim.lr_scheduler`` scheduler with a ``StepMode``.

    Args:
        scheduler: the torch scheduler.
        step_mode: when the trainer calls ``step()``.
        frequency: step every ``frequency`` batches, epochs or optimizer steps.
    """

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: "LRScheduler.StepMode", frequency: int = 1):
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(
                f"step_mode must be an LRScheduler.StepMode. Got {type(step_mode)}; use e.g. "
                "LRScheduler.StepMode.STEP_EVERY_EPOCH."
            )
        if not isinstance(frequency, int) or isinstance(frequency, bool) or frequency < 1:
            raise ValueError(f"LRScheduler(frequency={frequency!r}): expected an int >= 1.")
        self._scheduler = scheduler
        self._step_mode = step_mode
        self._frequency = frequency

    def step(self, *args: Any, **kwargs: Any) -> None:
        self._scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> List:
        return list(self._scheduler.get_last_lr())

    def load_state_dict(self, state_dict: Dict[Any, Any]) -> None:
        self._scheduler.load_state_dict(state_dict)

    def state_dict(self) -> Dict[Any, Any]:
        return dict(self._scheduler.state_dict())


def due_steps(
    step_mode: LRScheduler.StepMode,
    frequency: int,
    batch_idx: int,
    aggregation_frequency: int,
    *,
    epoch_len: int,
) -> int:
    """How many times to step a scheduler after batch ``batch_idx`` (0-based) finished with an
    optimizer step. Called only on batches that step the optimizer, as in Determined.

    >>> E = LRScheduler.StepMode
    >>> due_steps(E.STEP_EVERY_BATCH, 2, 7, 4, epoch_len=10)  # batches 4..7: 5 and 7 are due
    2
    >>> due_steps(E.STEP_EVERY_EPOCH, 1, 9, 1, epoch_len=10)  # last batch of the first epoch
    1
    """
    if step_mode is LRScheduler.StepMode.STEP_EVERY_BATCH:
        first = batch_idx - aggregation_frequency + 1
        return sum(1 for i in range(first, batch_idx + 1) if (i + 1) % frequency == 0)
    if step_mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
        # Determined counts this in batches, not in optimizer steps; keep its numbers.
        return int((batch_idx + 1) % frequency == 0)
    if step_mode is LRScheduler.StepMode.STEP_EVERY_EPOCH:
        # Step for each epoch that ends before the next batch that steps the optimizer.
        this_epoch = batch_idx // epoch_len
        next_epoch = (batch_idx + aggregation_frequency) // epoch_len
        return sum(1 for e in range(this_epoch, next_epoch) if (e + 1) % frequency == 0)
    return 0
