"""The enums of ``determined.core``, with Determined 0.38.1's members and values."""

import enum


class DownloadMode(enum.Enum):
    """How ``restore_path()``/``download()`` coordinate workers (locally: every worker reads the
    checkpoint directory itself, so both modes behave alike)."""

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


class PreemptMode(enum.Enum):
    """Who may call ``should_preempt()``: every worker in step, or the chief only."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class SearcherMode(enum.Enum):
    """Who may call ``searcher.operations()`` (deprecated in Determined 0.38.0)."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHEIF_ONLY"  # Determined's spelling


class Unit(enum.Enum):
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class EarlyExitReason(enum.Enum):
    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


class TensorboardMode(enum.Enum):
    """``AUTO``: the chief writes reported metrics to TensorBoard; ``MANUAL``: nothing is
    written for you."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


__all__ = [
    "DownloadMode",
    "EarlyExitReason",
    "PreemptMode",
    "SearcherMode",
    "TensorboardMode",
    "Unit",
]
