"""``Checkpoint``: one checkpoint where it lies (a directory or a bucket's prefix), what its
trial was, and the order ``list_checkpoints`` sorts checkpoints in."""

import datetime
import json
import logging
import os
import pathlib
import re
import shutil
import socket
import uuid as uuid_lib
import warnings
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    NoReturn,
    Optional,
    Tuple,
    Union,
)

from det_lightning import errors
from det_lightning._job_processes import pid_alive
from det_lightning.experimental._values import (
    METRICS_INSTEAD,
    CheckpointSortBy,
    CheckpointState,
    DownloadMode,
    OrderBy,
    refuse,
)

if TYPE_CHECKING:
    from det_lightning._runner.config._searcher import SearcherConfig
    from det_lightning.experimental._determined import Determined
    from det_lightning.pytorch._checkpoint import Listed
    from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("determined.client")


class CheckpointTrainingMetadata:
    """What a checkpoint's trial was: its experiment's config and id, its trial's number and
    hyperparameters, and the validation reported at its batch (``{"avgMetrics": {...}}``, as
    Determined's; empty when none was)."""

    def __init__(  # noqa: PLR0917  Determined's signature
        self,
        experiment_config: Dict[str, Any],
        experiment_id: Optional[str],
        trial_id: Optional[int],
        hparams: Dict[str, Any],
        validation_metrics: Dict[str, Any],
    ) -> None:
        self.experiment_config = experiment_config
        self.experiment_id = experiment_id
        self.trial_id = trial_id
        self.hparams = hparams
        self.validation_metrics = validation_metrics

    def __repr__(self) -> str:
        return (
            f"CheckpointTrainingMetadata(experiment_id={self.experiment_id!r}, "
            f"trial_id={self.trial_id!r}, hparams={self.hparams!r}, "
            f"validation_metrics={self.validation_metrics!r})"
        )


def _validation_metrics(metadata: Dict[str, Any]) -> Dict[str, float]:
    """The validation metrics ``metadata.json`` records for a checkpoint's batch."""
    from det_lightning.pytorch._retention import VALIDATION_KEY

    validation = metadata.get(VALIDATION_KEY) or {}
    metrics = dict(validation.get("metrics") or {})
    if validation.get("metric") is not None and validation.get("value") is not None:
        metrics.setdefault(validation["metric"], validation["value"])
    return metrics


# The keys det_lightning's own reading of a checkpoint needs (its resume, its retention).
_OWN_PREFIX = "det_lightning"
# ... and the trainer's keys, which loading and resuming read (steps_completed picks `latest`).
_TRAINER_KEYS = ("determined_version", "steps_completed", "framework", "format")


class Checkpoint:
    """A checkpoint, where it lies (a directory or a bucket's prefix).

    Attributes:
        uuid: its name.
        metadata: its ``metadata.json``.
        state: ``CheckpointState.COMPLETED`` (a checkpoint appears only once complete).
        training: ``CheckpointTrainingMetadata``; None for one no trial wrote.
        report_time: when it was written (ISO 8601, UTC).
        resources: None (its file sizes are not read up front).
        task_id, allocation_id: None (no master's tasks).
    """

    def __init__(self, session: Any, uuid: str) -> None:
        if not hasattr(session, "_record"):  # a Determined(), which reads the files
            refuse("Checkpoint(session, uuid)", "Use client.get_checkpoint(uuid).")
        self._session = session
        self.uuid = uuid
        self.task_id: Optional[str] = None
        self.allocation_id: Optional[str] = None
        self.report_time: Optional[str] = None
        self.resources: Optional[Dict[str, Any]] = None
        self.metadata: Optional[Dict[str, Any]] = None
        self.state: Optional[CheckpointState] = None
        self.training: Optional[CheckpointTrainingMetadata] = None
        self._store: Optional["CheckpointStore"] = None
        self._trial: Optional[int] = None
        self._experiment: Optional[str] = None
        self._experiment_config: Optional[Dict[str, Any]] = None
        self._trial_hparams: Optional[Dict[str, Any]] = None
        self._validations: Dict[int, Dict[str, float]] = {}

    @classmethod
    def _found(
        cls,
        session: "Determined",
        store: "CheckpointStore",
        entry: "Listed",
        *,
        experiment: Optional[str] = None,
        trial: Optional[int] = None,
        config: Optional[Dict[str, Any]] = None,
        hparams: Optional[Dict[str, Any]] = None,
        validations: Optional[Dict[int, Dict[str, float]]] = None,
    ) -> "Checkpoint":
        """The checkpoint ``entry`` at ``store``; of trial ``trial`` of experiment
        ``experiment`` (its ``config``, ``hparams``, and the validations the search kept, by
        batches: a Core API loop's checkpoint gets the one at its ``steps_completed``)."""
        checkpoint = cls(session, entry.name)
        checkpoint._store = store
        checkpoint._experiment, checkpoint._trial = experiment, trial
        checkpoint._experiment_config, checkpoint._trial_hparams = config, hparams
        checkpoint._validations = validations or {}
        checkpoint._hydrate(entry)
        return checkpoint

    def _hydrate(self, entry: "Listed") -> None:
        from det_lightning.pytorch._identity import IDENTITY_KEY

        metadata = dict(entry.metadata)
        self.metadata = metadata
        self.state = CheckpointState.COMPLETED
        when = datetime.datetime.fromtimestamp(entry.mtime, datetime.timezone.utc)
        self.report_time = when.isoformat(timespec="seconds")
        identity = metadata.get(IDENTITY_KEY) or {}
        experiment = self._experiment or identity.get("experiment_id")
        trial = self._trial if self._trial is not None else identity.get("trial")
        hparams, config = self._trial_hparams, self._experiment_config
        if hparams is None or config is None:
            assert self._store is not None
            load_data = self._store.parent.read_load_data(self.uuid)
            if not load_data and not identity:
                self.training = None  # a Core API loop's files: no trial's
                return
            hparams = hparams if hparams is not None else load_data.get("hparams")
            config = config if config is not None else load_data.get("experiment_config")
        metrics = {**self._validations.get(self._batches, {}), **_validation_metrics(metadata)}
        self.training = CheckpointTrainingMetadata(
            experiment_config=dict(config or {}),
            experiment_id=experiment,
            trial_id=trial,
            hparams=dict(hparams or identity.get("hparams") or {}),
            validation_metrics={"avgMetrics": metrics} if metrics else {},
        )

    @property
    def _batches(self) -> int:
        return int((self.metadata or {}).get("steps_completed") or 0)

    def reload(self) -> None:
        """Reads the checkpoint again; raises if it was deleted since."""
        store = self._require_store()
        entry = next((e for e in store.parent.published() if e.name == self.uuid), None)
        if entry is None:
            self.state = CheckpointState.DELETED
            raise errors.CheckpointNotFound(f"checkpoint {self.uuid} is no longer at {store}.")
        self._hydrate(entry)

    def _require_store(self) -> "CheckpointStore":
        if self._store is None:
            self._store = self._session._find_checkpoint(self.uuid)._store
        assert self._store is not None
        return self._store

    def download(self, path: Optional[str] = None, mode: DownloadMode = DownloadMode.AUTO) -> str:
        """A local directory with the checkpoint's files, to load it from
        (``pytorch.load_trial_from_checkpoint_path``).

        Args:
            path: copy the files into this directory (left as it is when it holds a
                ``metadata.json`` already, as Determined's). None: the checkpoint's own
                directory when it is on this machine (nothing is copied), else a download into
                det_lightning's cache (``$DET_LIGHTNING_CACHE_DIR``).
            mode: ignored (there is no master to download through).

        Returns:
            The directory.
        """
        if self.state not in (CheckpointState.COMPLETED, CheckpointState.PARTIALLY_DELETED):
            raise errors.CheckpointStateException(
                f"Only COMPLETED checkpoints can be downloaded; checkpoint {self.uuid} is "
                f"{self.state.name if self.state else 'unknown (call reload())'}."
            )
        store = self._require_store()
        if path is None:
            return str(store.local_copy())
        target = pathlib.Path(path)
        if (target / "metadata.json").exists():
            return str(target)
        with store.parent.files_of(self.uuid) as source:
            _copy_checkpoint(source, target)
        return str(target)

    def write_metadata_file(self, path: str) -> None:
        """Writes the checkpoint's metadata to the file ``path`` (JSON)."""
        with open(path, "w") as f:
            json.dump(self.metadata, f, indent=2)

    def add_metadata(self, metadata: Dict[str, Any]) -> None:
        """Adds (or replaces) keys of the checkpoint's ``metadata.json``, in its directory:
        the file is replaced whole, atomically. The keys written with the checkpoint
        (``steps_completed``, ``format``, ``det_lightning*``, ...) cannot be changed: loading
        and resuming read them. A checkpoint in a bucket cannot be changed here."""
        _refuse_own_keys(metadata, "add_metadata")
        self._rewrite_metadata({**(self.metadata or {}), **metadata})

    def remove_metadata(self, keys: List[str]) -> None:
        """Removes top-level keys of the checkpoint's ``metadata.json`` (see ``add_metadata``)."""
        _refuse_own_keys(keys, "remove_metadata")
        self._rewrite_metadata({k: v for k, v in (self.metadata or {}).items() if k not in keys})

    def _rewrite_metadata(self, metadata: Dict[str, Any]) -> None:
        store = self._require_store()
        if not store.is_local:
            raise NotImplementedError(
                f"checkpoint {self.uuid} is in a bucket ({store}); its metadata.json is changed "
                "only in a directory. Download it (download(path)) and change the copy."
            )
        directory = pathlib.Path(str(store))
        text = json.dumps(metadata, indent=2, default=str)
        sweep_temporaries(directory, ".metadata.json")
        temporary = directory / temporary_name(".metadata.json")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            with os.fdopen(os.open(temporary, flags, 0o666), "w") as f:  # the umask's mode
                f.write(text)
            os.replace(temporary, directory / "metadata.json")
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        self.metadata = metadata

    def delete(self) -> None:
        """Deletes the checkpoint (atomically: it disappears whole or stays whole)."""
        store = self._require_store()
        if not store.parent.delete(self.uuid):
            raise errors.CheckpointStorageError(
                f"checkpoint {self.uuid} could not be deleted from {store.parent} (the log says "
                "why); it is whole and marked for the next run's sweep."
            )
        self.state = CheckpointState.DELETED
        logger.info(f"deleted checkpoint {self.uuid}")

    def remove_files(self, globs: List[str]) -> None:
        refuse(
            "Checkpoint.remove_files",
            "A checkpoint is written and deleted whole; delete() removes it.",
        )

    def get_metrics(self, group: Optional[str] = None) -> NoReturn:
        refuse("Checkpoint.get_metrics", METRICS_INSTEAD)

    def __repr__(self) -> str:
        return f"Checkpoint(uuid={self.uuid!r}, trial={self._trial!r}, at={str(self._store)!r})"


def _refuse_own_keys(keys: Iterable[str], method: str) -> None:
    own = sorted(k for k in keys if k.startswith(_OWN_PREFIX) or k in _TRAINER_KEYS)
    if own:
        raise ValueError(
            f"Checkpoint.{method}: {', '.join(own)} are written with the checkpoint and read "
            "when it is loaded or resumed (steps_completed decides `latest`); choose other "
            "names."
        )


def temporary_name(prefix: str) -> str:
    """``<prefix>.<host>.<pid>.<hex>``: a hidden temporary file's or folder's name that says
    which process wrote it, so that what a killed one left can be told from what a live one
    is writing (``sweep_temporaries``)."""
    return f"{prefix}.{socket.gethostname()}.{os.getpid()}.{uuid_lib.uuid4().hex}"


def sweep_temporaries(directory: pathlib.Path, prefix: str) -> List[pathlib.Path]:
    """Removes the temporaries named ``temporary_name(prefix)`` (``.partial`` or not) in
    ``directory`` that a process of this machine left and that is gone (SIGKILL, a power
    loss); another machine's, and a live process's, stay. Returns what it removed."""
    pattern = re.compile(
        rf"^{re.escape(prefix)}\.(?P<host>.+)\.(?P<pid>\d+)\.[0-9a-f]{{32}}(\.partial)?$"
    )
    host, removed = socket.gethostname(), []
    for path in directory.iterdir() if directory.is_dir() else []:
        found = pattern.match(path.name)
        if not found or found["host"] != host:
            continue
        pid = int(found["pid"])
        if pid == os.getpid() or pid_alive(pid):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _copy_checkpoint(source: pathlib.Path, target: pathlib.Path) -> None:
    """Copies the checkpoint at ``source`` to ``target``: into a hidden sibling that is
    renamed into place, so that ``target`` never holds part of it; into ``target`` itself
    when it exists already (an empty directory, say), ``metadata.json`` last, so that a
    partial copy is never taken for a checkpoint."""
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        sweep_temporaries(target.parent, f".{target.name}")
        partial = target.parent / f"{temporary_name(f'.{target.name}')}.partial"
        try:
            shutil.copytree(source, partial, dirs_exist_ok=True)
            os.rename(partial, target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return

    def last(directory: str, names: List[str]) -> List[str]:  # the top level's, not code/'s
        return ["metadata.json"] if pathlib.Path(directory) == source else []

    shutil.copytree(source, target, dirs_exist_ok=True, ignore=last)
    shutil.copy2(source / "metadata.json", target / "metadata.json")


def listed(
    checkpoints: List[Checkpoint],
    searcher: "SearcherConfig",
    *,
    sort_by: Any,
    order_by: Optional[OrderBy],
    max_results: Optional[int],
) -> List[Checkpoint]:
    """What ``list_checkpoints`` returns: ``checkpoints`` sorted (``sort_by`` and ``order_by``
    given both or neither), at most ``max_results``."""
    field, order = check_order(sort_by, order_by)
    found = sort_checkpoints(checkpoints, field, order, searcher)
    return found[:max_results] if max_results else found


def best_first(sort_by: Optional[str], smaller_is_better: Optional[bool]) -> Optional[OrderBy]:
    """The order ``top_checkpoint(sort_by, smaller_is_better)`` lists in (None: the
    searcher's)."""
    if not sort_by:
        return None
    return OrderBy.ASC if smaller_is_better else OrderBy.DESC


def deprecated(method: str, instead: str) -> None:
    """Determined's FutureWarning for a method it deprecated, pointing at its replacement."""
    warnings.warn(
        f"{method}() has been deprecated and will be removed in a future version. "
        f"Please call {instead} instead.",
        FutureWarning,
        stacklevel=3,
    )


def check_order(
    sort_by: Any, order_by: Optional[OrderBy]
) -> Tuple[Union[str, CheckpointSortBy], Optional[OrderBy]]:
    if (sort_by is None) != (order_by is None):
        raise AssertionError("sort_by and order_by must be either both set, or neither.")
    if sort_by is not None and not isinstance(sort_by, (CheckpointSortBy, str)):
        raise ValueError("sort_by must be of type CheckpointSortBy or str")
    return (sort_by or CheckpointSortBy.SEARCHER_METRIC), order_by


def sort_checkpoints(
    checkpoints: List[Checkpoint],
    sort_by: Union[str, CheckpointSortBy],
    order_by: Optional[OrderBy],
    searcher: "SearcherConfig",
) -> List[Checkpoint]:
    """``checkpoints`` sorted as a master sorts them: by a field or a validation metric (those
    without it last); by default by the searcher metric, best first."""
    if sort_by is CheckpointSortBy.SEARCHER_METRIC:
        sort_by = searcher.metric
        if order_by is None:
            order_by = OrderBy.ASC if searcher.smaller_is_better else OrderBy.DESC
    descending = order_by in (OrderBy.DESC, OrderBy.DESCENDING)
    if isinstance(sort_by, str):

        def metric(c: Checkpoint) -> Optional[float]:
            metrics = (c.training.validation_metrics if c.training else {}).get("avgMetrics")
            value = (metrics or {}).get(sort_by)
            return None if value is None else float(value)

        with_value = [c for c in checkpoints if metric(c) is not None]
        without = [c for c in checkpoints if metric(c) is None]
        with_value.sort(key=lambda c: metric(c), reverse=descending)  # type: ignore[arg-type, return-value]
        return with_value + without
    keys: Dict[CheckpointSortBy, Callable[[Checkpoint], Any]] = {
        CheckpointSortBy.UUID: lambda c: c.uuid,
        CheckpointSortBy.TRIAL_ID: lambda c: (c._trial or 0, c._batches),
        CheckpointSortBy.BATCH_NUMBER: lambda c: c._batches,
        CheckpointSortBy.END_TIME: lambda c: c.report_time or "",
        CheckpointSortBy.STATE: lambda c: c.state.value if c.state else "",
    }
    return sorted(checkpoints, key=keys[sort_by], reverse=descending)


__all__ = [
    "Checkpoint",
    "CheckpointTrainingMetadata",
    "best_first",
    "check_order",
    "deprecated",
    "listed",
    "sort_checkpoints",
]
