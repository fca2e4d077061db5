"""``Determined``: the client over the files experiments leave (``_runner._bookkeeping``),
where Determined's asked a master's database::

    Determined(checkpoint_dir=None, storage=None)   where the experiments are
      .get_experiment("mnist-3f2a9c01de") -> Experiment   <root>/<id>/experiment.json
        .list_trials() -> [Trial]                          the search storage's trials
        .list_checkpoints() -> [Checkpoint]                <root>/<id>/trial-<n>/<uuid>/
      .get_trial("mnist-3f2a9c01de/2") -> Trial
      .get_checkpoint(uuid) -> Checkpoint                  any of them, or <root>/<uuid>/
        .download(path) -> str                             a local directory to load from

Ids are det_lightning's: an experiment's is its name and a hash (``det-lightning experiment
list`` shows them), a trial's its number in the experiment. A checkpoint's validation metrics
are those reported at its batch (``metadata.json``, since 2026-11-29; before, the searcher
metric only). ``create_experiment`` starts ``det-lightning experiment`` in a process of its own,
as a master would start it, and ``Experiment.wait()`` waits for it.
"""

import hashlib
import logging
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from det_lightning import errors
from det_lightning.experimental._checkpoint import Checkpoint
from det_lightning.experimental._experiment import Experiment
from det_lightning.experimental._trial import Trial
from det_lightning.experimental._values import (
    ExperimentNotFound,
    ExperimentSortBy,
    ExperimentState,
    OrderBy,
    TrialMetrics,
    TrialNotFound,
    refuse,
)

if TYPE_CHECKING:
    from det_lightning.pytorch._store import CheckpointStore

logger = logging.getLogger("determined.client")


class Determined:
    """The client, over the experiments under a checkpoint directory.

    Args:
        master, user, password, cert_path, cert_name, noverify: Determined's; ignored (there
            is no master).
        checkpoint_dir: where the experiments are (default: ``$DET_LIGHTNING_CHECKPOINT_DIR``,
            else ``./checkpoints``): a directory or a bucket URL, as
            ``det-lightning experiment --checkpoint-dir`` takes.
        storage: the search storage the experiments used when they ran with ``--storage``.
    """

    def __init__(  # noqa: PLR0917  Determined's signature
        self,
        master: Optional[str] = None,
        user: Optional[str] = None,
        password: Optional[str] = None,
        cert_path: Optional[str] = None,
        cert_name: Optional[str] = None,
        noverify: bool = False,
        *,
        checkpoint_dir: Optional[str] = None,
        storage: Optional[str] = None,
    ) -> None:
        if master:
            logger.debug(f"master {master} ignored: det_lightning reads experiments locally")
        self._checkpoint_dir = checkpoint_dir
        self._storage = storage

    def _root(self) -> "CheckpointStore":
        from det_lightning._runner._bookkeeping import checkpoint_root

        return checkpoint_root(self._checkpoint_dir)

    def _record(
        self, experiment_id: str, root: Optional["CheckpointStore"] = None
    ) -> Dict[str, Any]:
        """Experiment ``experiment_id``'s record under ``root`` (default: the client's)."""
        from det_lightning._runner._bookkeeping import find_record, records

        root = root if root is not None else self._root()
        record = find_record(root, experiment_id)
        if record is None:
            known = ", ".join(str(r.get("id")) for r in records(root)) or "none"
            hint = (
                " Experiment ids here are names, not numbers."
                if isinstance(experiment_id, int) or str(experiment_id).isdigit()
                else ""
            )
            raise ExperimentNotFound(
                f"no experiment {experiment_id!r} under {root}.{hint} The experiments there: "
                f"{known} (`det-lightning experiment list`; another folder: "
                "Determined(checkpoint_dir=...) or $DET_LIGHTNING_CHECKPOINT_DIR)."
            )
        return record

    def get_experiment(self, experiment_id: Any) -> Experiment:
        """The experiment with id ``experiment_id`` (as ``det-lightning experiment list``
        shows it)."""
        experiment = Experiment(experiment_id, self)
        experiment._hydrate(self._record(str(experiment_id)))
        return experiment

    def list_experiments(  # noqa: PLR0917  Determined's signature
        self,
        sort_by: Optional[ExperimentSortBy] = None,
        order_by: Optional[OrderBy] = None,
        experiment_ids: Optional[List[Any]] = None,
        labels: Optional[List[str]] = None,
        users: Optional[List[str]] = None,
        states: Optional[List[ExperimentState]] = None,
        name: Optional[str] = None,
        project_id: Optional[int] = None,
    ) -> List[Experiment]:
        """The experiments under the checkpoint directory, oldest first (or sorted by ID,
        START_TIME, NAME or STATE), filtered by ids, labels, states and name."""
        from det_lightning._runner._bookkeeping import records

        found = []
        wanted = None if experiment_ids is None else {str(i) for i in experiment_ids}
        for record in records(self._root()):
            if wanted is not None and str(record.get("id")) not in wanted:
                continue
            if name is not None and record.get("name") != name:
                continue
            experiment = Experiment(record["id"], self)
            experiment._hydrate(record)
            if labels is not None and not (experiment.labels or set()) & set(labels):
                continue
            if states is not None and experiment.state not in states:
                continue
            found.append(experiment)
        keys: Dict[ExperimentSortBy, Callable[[Experiment], Any]] = {
            ExperimentSortBy.ID: lambda e: e.id,
            ExperimentSortBy.START_TIME: lambda e: str(e._record.get("created")),
            ExperimentSortBy.NAME: lambda e: e.name or "",
            ExperimentSortBy.STATE: lambda e: e.state.value if e.state else "",
        }
        if sort_by is not None:
            if sort_by not in keys:
                raise ValueError(
                    f"experiments sort here by {', '.join(k.name for k in keys)}; "
                    f"{sort_by} is not recorded locally."
                )
            descending = order_by in (OrderBy.DESC, OrderBy.DESCENDING)
            found.sort(key=keys[sort_by], reverse=descending)
        return found

    def _parse_trial_id(self, trial_id: Any) -> Tuple[str, int]:
        """``"<experiment id>/<n>"`` (or ``/trial-<n>``), or a number ``n`` when one
        experiment under the checkpoint directory has a trial ``n``."""
        text = str(trial_id)
        if "/" in text:
            experiment, number = text.rsplit("/", 1)
            number = number[len("trial-") :] if number.startswith("trial-") else number
            if number.isdigit():
                return experiment, int(number)
        elif text.isdigit():
            from det_lightning._runner._bookkeeping import records

            root = self._root()
            having = [
                str(r["id"])
                for r in records(root)
                if f"trial-{text}" in (root / str(r["id"])).folders()
            ]
            if len(having) == 1:
                return having[0], int(text)
            raise TrialNotFound(
                f"trial {text}: trial numbers count within an experiment, and "
                + (
                    f"{len(having)} experiments under {root} have a trial {text} "
                    f"({', '.join(having)}): name one, as get_trial('{having[0]}/{text}')."
                    if having
                    else f"no experiment under {root} has a trial {text}."
                )
            )
        raise ValueError(
            f"trial id {trial_id!r}: give '<experiment id>/<trial number>' (for example "
            "'mnist-3f2a9c01de/2'), or the trial's number where one experiment has it."
        )

    def get_trial(self, trial_id: Any) -> Trial:
        """The trial ``"<experiment id>/<n>"``, or ``n`` where one experiment has a trial
        ``n``."""
        experiment_id, number = self._parse_trial_id(trial_id)
        experiment = self.get_experiment(experiment_id)
        return experiment._trial(experiment._result(number))

    def iter_trials_metrics(self, trial_ids: List[Any], group: str) -> Iterator[TrialMetrics]:
        """The validations the search kept for each of ``trial_ids`` (``group="validation"``),
        trial by trial (``Trial.iter_metrics``)."""
        for trial_id in trial_ids:
            yield from self.get_trial(trial_id).iter_metrics(group)

    def _find_checkpoint(self, uuid: str) -> Checkpoint:
        from det_lightning._runner._bookkeeping import experiment_checkpoints, records

        root = self._root()
        for entry in root.published():  # a run's, straight under the directory
            if entry.name == uuid:
                return Checkpoint._found(self, root / uuid, entry)
        for record in records(root):
            for found in experiment_checkpoints(root, str(record["id"])):
                if found.entry.name == uuid:
                    experiment = self.get_experiment(str(record["id"]))
                    return next(c for c in experiment._checkpoints() if c.uuid == uuid)
        raise errors.CheckpointNotFound(
            f"no checkpoint {uuid} under {root} (`det-lightning checkpoint list` shows them; "
            "another folder: Determined(checkpoint_dir=...) or $DET_LIGHTNING_CHECKPOINT_DIR)."
        )

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        """The checkpoint named ``uuid``: an experiment's, or a run's under the directory."""
        return self._find_checkpoint(uuid)

    def create_experiment(  # noqa: PLR0917  Determined's signature
        self,
        config: Union[str, pathlib.Path, Dict[str, Any]],
        model_dir: Optional[str] = None,
        includes: Optional[Iterable[Union[str, pathlib.Path]]] = None,
        project_id: Optional[int] = None,
        template: Optional[str] = None,
    ) -> Experiment:
        """Starts ``det-lightning experiment CONFIG MODEL_DIR`` in a process of its own (it
        goes on if this one ends) and returns the experiment; ``wait()`` waits for it. Its
        output goes to ``<checkpoint dir>/<experiment id>/client-<time>.log``.

        An experiment already there (the same config) is continued, as a rerun of the command
        continues it.

        Raises:
            errors.InvalidConfigException: the config cannot run locally (naming the key).
        """
        if includes:
            refuse("create_experiment(includes=...)", "Put the files in the model directory.")
        if template is not None:
            refuse("create_experiment(template=...)", "Merge the template into the config.")
        if not isinstance(config, (str, os.PathLike, dict)):
            raise ValueError("config parameter must be dictionary or path")
        directory = str(pathlib.Path(model_dir or ".").resolve())
        plan, command, log = self._launch(
            config, directory, self._checkpoint_dir, storage=self._storage
        )
        experiment = Experiment(plan.experiment_id, self)
        experiment._root = plan.checkpoint_root.parent  # checkpoint_storage may put it elsewhere
        experiment._command, experiment._log = command, log
        experiment._process = self._start(command, log)
        print(f"Started experiment {plan.experiment_id}; its output: {log}", file=sys.stderr)
        self._wait_for_record(experiment)
        return experiment

    def _launch(
        self,
        config: Union[str, "os.PathLike[str]", Dict[str, Any]],
        directory: str,
        checkpoint_dir: Optional[str],
        *,
        storage: Optional[str],
        flags: Sequence[str] = (),
    ) -> Tuple[Any, List[str], pathlib.Path]:
        """The experiment's plan (every check before it starts), the command that runs it
        (with ``--storage storage`` and the launch ``flags``) and the file its output goes to
        (beside its checkpoints, or for a bucket in the temporary directory)."""
        from det_lightning._runner.config import load_config
        from det_lightning._runner.plan import plan_experiment

        plan = plan_experiment(
            load_config(config if isinstance(config, dict) else str(config), announce=False),
            directory,
            checkpoint_dir=checkpoint_dir,
        )
        folder = plan.checkpoint_root
        logs = pathlib.Path(str(folder)) if folder.is_local else pathlib.Path(tempfile.gettempdir())
        logs.mkdir(parents=True, exist_ok=True)
        config_path = self._config_file(config, logs, plan.experiment_id)
        command = [sys.executable, "-m", "det_lightning", "experiment", config_path, directory]
        if checkpoint_dir:
            command[4:4] = ["--checkpoint-dir", checkpoint_dir]
        if storage:
            command[4:4] = ["--storage", storage]
        command[4:4] = list(flags)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log = logs / (
            f"client-{stamp}.log" if folder.is_local else f"{plan.experiment_id}-{stamp}.log"
        )
        return plan, command, log

    @staticmethod
    def _config_file(
        config: Union[str, "os.PathLike[str]", Dict[str, Any]], folder: pathlib.Path, name: str
    ) -> str:
        """The config file the experiment's command reads (and ``activate()`` rereads): the
        given file, or a dict written beside the experiment's logs, named by its content (the
        same dict, the same file: a rerun leaves no second copy)."""
        if not isinstance(config, dict):
            return str(pathlib.Path(config).resolve())
        import yaml

        text = yaml.safe_dump(config, sort_keys=False)
        digest = hashlib.sha1(text.encode()).hexdigest()[:10]
        path = folder / (
            f"config-{digest}.yaml" if folder.name == name else f"{name}-{digest}.yaml"
        )
        if not path.exists() or path.read_text() != text:
            from det_lightning.pytorch._local_store import replace_file

            replace_file(path, text.encode())
        return str(path)

    @staticmethod
    def _start(command: Sequence[str], log: Optional[pathlib.Path]) -> subprocess.Popen:
        assert log is not None
        with open(log, "ab") as out:
            return subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a master's experiment outlives its client
            )

    def _wait_for_record(self, experiment: Experiment, timeout_s: float = 300.0) -> None:
        """Waits until the started experiment's record exists (its first act), or its
        process ended without one (then raises, with its output)."""
        process = experiment._process
        assert process is not None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                experiment.reload()
                return
            except ExperimentNotFound:
                pass
            if process.poll() is not None:
                log = experiment._log
                tail = log.read_text(errors="replace")[-2000:] if log else ""
                raise ExperimentNotFound(
                    f"experiment {experiment.id} exited with status {process.returncode} before "
                    f"it began; its output ({log}):\n{tail}"
                )
            if time.monotonic() > deadline:
                return  # still starting: wait() and reload() read it once it is there
            time.sleep(0.2)


__all__ = ["Determined"]
