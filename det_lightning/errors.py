"""Public exceptions.

Determined's ``InvalidExperimentException`` derives from ``BaseException``, so a bare
``except Exception`` in user code never sees it. Ours derive from ``ValueError``/``RuntimeError``
and keep Determined's names, so code that catches the Determined names keeps working.
"""


class InvalidExperimentException(ValueError):
    """The trial or its configuration is misused (for example, an optimizer never wrapped)."""


class InternalException(RuntimeError):
    """A context method was called at a time when it has no answer (e.g. before training)."""


class InvalidCheckpointException(ValueError):
    """A checkpoint directory is missing files, truncated, or does not fit the trial."""


class InvalidConfigException(ValueError):
    """An experiment configuration has an unknown key or a value of the wrong type."""


class NonFiniteLossError(FloatingPointError):
    """A training metric (usually the loss) became NaN or infinite."""


__all__ = [
    "InvalidExperimentException",
    "InternalException",
    "InvalidCheckpointException",
    "InvalidConfigException",
    "NonFiniteLossError",
]
