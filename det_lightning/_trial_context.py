"""``determined.TrialContext``: the base class of the trial contexts.

Trials annotate their constructor with it (``def __init__(self, context: det.TrialContext)``);
``pytorch.PyTorchTrialContext`` derives from it, so such annotations and isinstance checks hold.
"""


class TrialContext:
    """The system-provided API to a trial; ``pytorch.PyTorchTrialContext`` is the one used."""


__all__ = ["TrialContext"]
