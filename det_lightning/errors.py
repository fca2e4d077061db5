"""Public exceptions.

Determined's ``InvalidExperimentException`` derives from ``BaseException``, so a bare
``except Exception`` in user code never sees it. Ours derive from ``ValueError``/``RuntimeError``
and keep Determined's names, so code that catches the Determined names keeps working.
"""

from typing import Any, Dict


class InvalidExperimentException(ValueError):
    """The trial or its configuration is misused (for example, an optimizer never wrapped)."""


class InternalException(RuntimeError):
    """A context method was called at a time when it has no answer (e.g. before training)."""


class InvalidCheckpointException(ValueError):
    """A checkpoint directory is missing files, truncated, or does not fit the trial."""


class InvalidConfigException(ValueError):
    """An experiment configuration has an unknown key or a value of the wrong type."""


# ----- the rest of ``determined.errors``, so ``except det.errors.X`` keeps working -------------
class InvalidDataTypeException(InvalidExperimentException):
    """A value of the wrong type reached the trial's machinery (Determined's signature)."""

    def __init__(self, typ: type, message: str) -> None:
        super().__init__(f"Invalid data type ({typ.__name__}): {message}.")


class InvalidConfigurationException(InvalidExperimentException):
    """The experiment's configuration does not fit the trial (Determined's signature)."""

    def __init__(self, config: Dict[str, Any], message: str) -> None:
        super().__init__(f"Invalid configuration ({config}): {message}.")


class InvalidModelException(InvalidExperimentException):
    """The model is invalid, or (partly) unsupported."""


class CheckpointNotFound(FileNotFoundError):
    """A checkpoint could not be found in checkpoint storage."""


class CheckpointStateException(RuntimeError):
    """A checkpoint is in a state that does not allow the operation."""


class SkipWorkloadException(Exception):
    """Raised by a trial to skip the current phase (accepted for import compatibility)."""


class EnterpriseOnlyError(NotImplementedError):
    """A feature of Determined's enterprise edition; there is no master here."""


class StopLoadingImplementation(Exception):
    """Interrupts loading the user's code (Determined's harness internals)."""


class WorkerError(RuntimeError):
    """A worker process failed and the reason is unknown."""


class WorkerFinishedGracefully(Exception):
    """A worker process finished before the others."""


class NoDirectStorageAccess(PermissionError):
    """Checkpoint storage cannot be reached directly (credentials or permissions)."""


class ProxiedDownloadFailed(RuntimeError):
    """A checkpoint download through a master failed (there is no master here)."""


class MultipleDownloadsFailed(RuntimeError):
    """Every way of downloading a checkpoint failed."""


class NonFiniteLossError(FloatingPointError):
    """The training ``loss`` became NaN or infinite, with ``Trainer(stop_on_nonfinite_loss=True)``
    or ``DET_LIGHTNING_STOP_ON_NONFINITE_LOSS=1``; otherwise training goes on with a warning."""


class CheckpointStorageError(OSError):
    """The checkpoint directory cannot be written (missing, read-only, full); the message names
    the path and the cause. Earlier complete checkpoints are kept."""


class InvalidHP(Exception):
    """Raised by a trial to reject its hyperparameters (``det.InvalidHP`` in Determined).

    A search drops such a trial (random and adaptive_asha start another in its place; it does
    not count toward ``max_trials``). Raised inside ``with pytorch.init()``, it ends the process
    with status 0 (:class:`InvalidHPExit`), as Determined's ``core.init()`` does: rejecting
    hyperparameters is not an error.
    """

    def __init__(self, msg: str = "...") -> None:
        if not isinstance(msg, str):
            raise TypeError(
                "InvalidHP(msg) takes a message string, not a "
                f"{type(msg).__name__}: raise det.InvalidHP('why these hyperparameters fail')."
            )
        super().__init__(msg)
        self.msg = msg


class NotProvidedError(ModuleNotFoundError, NotImplementedError):
    """A Determined name det_lightning deliberately does not provide (a cluster or harness
    feature with no local meaning); the message says why and what to use instead.

    A ``ModuleNotFoundError`` (an ``ImportError``), so ``from determined.core import init``
    fails as an import does and ``try: ... except ImportError`` fallbacks for optional parts
    (``determined.pytorch.deepspeed``) work; and a ``NotImplementedError``.
    """


class NotProvidedAttributeError(AttributeError, NotImplementedError):
    """An attribute of a Determined class that det_lightning deliberately does not provide (a
    private one with no meaning here); the message says what to use instead.

    An ``AttributeError``, so ``hasattr()`` is False and ``getattr(obj, name, default)`` falls
    back as it would for a missing attribute.
    """


class InvalidHPExit(SystemExit, InvalidHP):
    """``pytorch.init()``'s exit when its block raised :class:`InvalidHP`: status 0, as in
    Determined ("InvalidHP detected during Trial init, converting InvalidHP to exit(0)"), after
    the trainer saved a checkpoint of the batches trained since the last one.

    Also an ``InvalidHP``, so ``except det.InvalidHP`` still catches it (a search drops the
    trial); left uncaught, the process exits with status 0.
    """

    def __init__(self, msg: str) -> None:
        SystemExit.__init__(self, 0)
        self.msg = msg

    def __str__(self) -> str:
        return self.msg


class TrialPreempted(SystemExit):
    """``Trainer.fit()`` stopped on SIGTERM/SIGINT after saving a checkpoint.

    A ``SystemExit``: left uncaught, the process ends with status ``EXIT_CODE`` (75, sysexits'
    ``EX_TEMPFAIL``: "try again"). Run again with ``fit(latest_checkpoint="latest")`` (or
    ``DET_LIGHTNING_LATEST_CHECKPOINT=latest``) to continue. ``checkpoint`` is the last
    checkpoint's path, if any; ``reported``: the message was already logged (by the trainer,
    or by the trial's own process), so ``det-lightning`` does not print it again.
    """

    EXIT_CODE = 75

    def __init__(
        self, message: str = "", checkpoint: "str | None" = None, reported: bool = False
    ) -> None:
        super().__init__(self.EXIT_CODE)
        self.message = message
        self.checkpoint = checkpoint
        self.reported = reported

    def __str__(self) -> str:
        return self.message


__all__ = [
    "InvalidHP",
    "InvalidExperimentException",
    "InternalException",
    "InvalidCheckpointException",
    "InvalidConfigException",
    "InvalidDataTypeException",
    "InvalidConfigurationException",
    "InvalidModelException",
    "CheckpointNotFound",
    "CheckpointStateException",
    "SkipWorkloadException",
    "EnterpriseOnlyError",
    "StopLoadingImplementation",
    "WorkerError",
    "WorkerFinishedGracefully",
    "NoDirectStorageAccess",
    "ProxiedDownloadFailed",
    "MultipleDownloadsFailed",
    "NonFiniteLossError",
    "CheckpointStorageError",
    "TrialPreempted",
    "NotProvidedError",
    "NotProvidedAttributeError",
    "InvalidHPExit",
]
