"""``Experiment``: an experiment's folder under the checkpoint directory, its trials and
checkpoints; its command's process (``wait`` for one the client started; ``activate``,
``pause``, ``cancel``, ``kill``, ``delete`` for any)."""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    NoReturn,
    Optional,
    Set,
    Tuple,
    Union,
)

from det_lightning.experimental._checkpoint import (
    Checkpoint,
    best_first,
    deprecated,
    listed,
    sort_checkpoints,
)
from det_lightning.experimental._trial import Trial
from det_lightning.experimental._values import (
    TERMINAL_STATES,
    TRIAL_STATES,
    CheckpointSortBy,
    ExperimentState,
    OrderBy,
    TrialNotFound,
    TrialSortBy,
    TrialState,
    refuse,
)

if TYPE_CHECKING:
    from det_lightning._runner.config._searcher import SearcherConfig
    from det_lightning._runner.trial import TrialResult
    from det_lightning.pytorch._store import CheckpointStore


class Experiment:
    """An experiment: its folder under the checkpoint directory.

    Attributes:
        id: its id (``<name>-<hash>``).
        name, config: its config's name and the config as given.
        state: an ``ExperimentState``.
        progress: the share of its trials that ended (0.0 to 1.0; None for a search of no
            fixed size while it runs).
        labels, description, notes, archived, project_id, workspace_id: the config's labels
            and description; the rest None.
    """

    def __init__(self, experiment_id: Any, session: Any) -> None:
        if not hasattr(session, "_record"):  # a Determined(), which reads the files
            refuse("Experiment(experiment_id, session)", "Use client.get_experiment(id).")
        self._id = str(experiment_id)
        self._session = session
        self.config: Optional[Dict[str, Any]] = None
        self.state: Optional[ExperimentState] = None
        self.labels: Optional[Set[str]] = None
        self.archived: Optional[bool] = None
        self.name: Optional[str] = None
        self.progress: Optional[float] = None
        self.description: Optional[str] = None
        self.notes: Optional[str] = None
        self.project_id: Optional[int] = None
        self.workspace_id: Optional[int] = None
        self._record: Dict[str, Any] = {}
        self._results: List["TrialResult"] = []
        self._process: Optional[subprocess.Popen] = None
        self._pausing = False  # paused by a mark while its trials still stop (_hydrate)
        self._command: List[str] = []
        self._log: Optional[pathlib.Path] = None
        # The directory that holds its folder: the client's, or its config's checkpoint_storage
        # for one the client started.
        self._root: "CheckpointStore" = session._root()

    @property
    def id(self) -> str:
        return self._id

    @property
    def _searcher(self) -> "SearcherConfig":
        from det_lightning._runner.config._searcher import SearcherConfig

        return SearcherConfig.from_experiment(self.config or {})

    def _hydrate(self, record: Dict[str, Any]) -> None:
        from det_lightning._runner._bookkeeping import state, stopped_state, trials_of
        from det_lightning._runner._record import stop_mark, stopped_by

        self._record = record
        self.config = dict(record.get("config") or {})
        self.name = str(record.get("name"))
        labels = self.config.get("labels")
        self.labels = set(labels) if labels else None
        self.description = self.config.get("description")
        self.archived = False
        self._results = trials_of(self._root, record, self._session._storage)
        searcher = self._searcher
        total = 1 if searcher.name == "single" else searcher.max_trials
        mark = stop_mark(self._root / self._id)
        by = stopped_by(mark) if mark is not None else None
        words = state(self._results, total, by)
        ended = [r for r in self._results if r.status not in ("RUNNING", "INTERRUPTED")]
        running = self._process is not None and self._process.poll() is None
        # Its trials train: in this client's process, or in another one (whose records say so).
        live = running or (
            self._process is None and any(r.status == "RUNNING" for r in self._results)
        )
        # Paused by a mark, its trials still stopping (activate() waits for them).
        self._pausing = by == "pause" and words != "COMPLETED" and live
        if by is not None and words != "COMPLETED":
            # STOPPING_CANCELED (STOPPING_KILLED) while the process that runs it sees the mark
            # and stops its trials (_interrupt), then CANCELED (its trials' records may still
            # say RUNNING); PAUSED at once.
            self.state = ExperimentState[stopped_state(by, live)]
        elif running and words != "COMPLETED":
            self.state = ExperimentState.ACTIVE
        elif self._process is not None and self._process.returncode not in (0, 75, None):
            self.state = ExperimentState.ERROR  # its command failed (the log says why)
        elif self._process is not None and words == "ACTIVE":
            self.state = ExperimentState.PAUSED  # its process ended while a trial trained
        elif words == "COMPLETED" and all(r.status == "ERROR" for r in self._results):
            self.state = ExperimentState.ERROR  # every trial failed
        else:
            self.state = ExperimentState[words]
        done = self.state is ExperimentState.COMPLETED
        self.progress = 1.0 if done else (min(len(ended) / total, 1.0) if total else None)

    def reload(self) -> None:
        """Reads the experiment's state and trials again."""
        self._hydrate(self._session._record(self._id, self._root))

    def _result(self, number: int) -> "TrialResult":
        for result in self._results:
            if result.number == number:
                return result
        raise TrialNotFound(
            f"experiment {self._id} has no trial {number} (it has "
            f"{', '.join(str(r.number) for r in self._results) or 'none yet'})."
        )

    def _trial(self, result: "TrialResult") -> Trial:
        trial = Trial(f"{self._id}/{result.number}", self._session)
        trial._hydrate(result, self)
        return trial

    def list_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> List[Trial]:
        """The experiment's trials, sorted."""
        return list(self.iter_trials(sort_by, order_by))

    def iter_trials(
        self,
        sort_by: TrialSortBy = TrialSortBy.ID,
        order_by: OrderBy = OrderBy.ASCENDING,
        limit: Optional[int] = None,
    ) -> Iterator[Trial]:
        """The experiment's trials, sorted (ID, STATE, BEST_VALIDATION_METRIC or
        BATCHES_PROCESSED), at most ``limit``."""
        smaller = self._searcher.smaller_is_better
        keys: Dict[TrialSortBy, Callable[["TrialResult"], Any]] = {
            TrialSortBy.ID: lambda r: r.number,
            TrialSortBy.STATE: lambda r: TRIAL_STATES.get(r.status, TrialState.ERROR).value,
            TrialSortBy.BEST_VALIDATION_METRIC: lambda r: (
                r.best_metric is None,
                (r.best_metric or 0.0) * (1 if smaller else -1),
            ),
            TrialSortBy.BATCHES_PROCESSED: lambda r: r.batches or 0,
        }
        if sort_by not in keys:
            raise ValueError(
                f"trials sort here by {', '.join(k.name for k in keys)}; "
                f"{sort_by} is not recorded locally."
            )
        descending = order_by in (OrderBy.DESC, OrderBy.DESCENDING)
        ordered = sorted(self._results, key=keys[sort_by], reverse=descending)
        for result in ordered[:limit] if limit else ordered:
            yield self._trial(result)

    def get_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy = OrderBy.ASCENDING
    ) -> List[Trial]:
        deprecated("Experiment.get_trials", "Experiment.list_trials()")
        return self.list_trials(sort_by, order_by)

    def await_first_trial(self, interval: float = 0.1) -> Trial:
        """The first trial, once the experiment has one."""
        while True:
            self.reload()
            if self._results:
                return self._trial(min(self._results, key=lambda r: r.number))
            if self._process is not None and self._process.poll() is not None:
                raise TrialNotFound(
                    f"experiment {self._id} ended without a trial; its log: {self._log}"
                )
            time.sleep(interval)

    def _checkpoints(self) -> List[Checkpoint]:
        from det_lightning._runner._bookkeeping import experiment_checkpoints

        hparams = {r.number: r.hparams for r in self._results}
        history = {r.number: {b: m for b, _, m in r.validations} for r in self._results}
        return [
            Checkpoint._found(
                self._session,
                found.store,
                found.entry,
                experiment=self._id,
                trial=found.trial,
                config=self.config,
                hparams=hparams.get(found.trial) or {},
                validations=history.get(found.trial),
            )
            for found in experiment_checkpoints(self._root, self._id)
        ]

    def list_checkpoints(
        self,
        sort_by: Optional[Union[str, CheckpointSortBy]] = None,
        order_by: Optional[OrderBy] = None,
        max_results: Optional[int] = None,
    ) -> List[Checkpoint]:
        """Every trial's checkpoints, sorted (by default by the searcher metric, best first;
        ``sort_by`` and ``order_by`` are given both or neither)."""
        return listed(
            self._checkpoints(),
            self._searcher,
            sort_by=sort_by,
            order_by=order_by,
            max_results=max_results,
        )

    def top_checkpoint(
        self, sort_by: Optional[str] = None, smaller_is_better: Optional[bool] = None
    ) -> Checkpoint:
        """The experiment's best checkpoint by ``sort_by`` (default: the searcher metric)."""
        deprecated("Experiment.top_checkpoint", "Experiment.list_checkpoints(...,max_results=1)")
        order_by = best_first(sort_by, smaller_is_better)
        found = self.list_checkpoints(sort_by=sort_by, order_by=order_by, max_results=1)
        if not found:
            raise AssertionError(f"No checkpoints found for experiment {self._id}")
        return found[0]

    def top_n_checkpoints(
        self, limit: int, sort_by: Optional[str] = None, smaller_is_better: Optional[bool] = None
    ) -> List[Checkpoint]:
        """The best checkpoint of each of the ``limit`` best trials."""
        deprecated("Experiment.top_n_checkpoints", "Experiment.list_checkpoints(...,max_results=n)")
        checkpoints = self._checkpoints()
        if not checkpoints:
            raise AssertionError(f"No checkpoint found for experiment {self._id}")
        if not sort_by:
            sort_by, smaller_is_better = self._searcher.metric, self._searcher.smaller_is_better
        order = OrderBy.ASC if smaller_is_better or smaller_is_better is None else OrderBy.DESC
        seen: Set[Optional[int]] = set()
        best = []
        for checkpoint in sort_checkpoints(checkpoints, sort_by, order, self._searcher):
            if checkpoint._trial not in seen:
                seen.add(checkpoint._trial)
                best.append(checkpoint)
        return best[:limit]

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Waits until the experiment ends and returns its state: for one this client
        started, until its process exits; else until its trials have ended.

        Raises:
            ValueError: it is PAUSED (stopped before its end): rerun its command, or
                ``activate()``.
        """
        waited = 0.0
        while True:
            if self._process is not None:
                try:
                    self._process.wait(timeout=interval)
                except subprocess.TimeoutExpired:
                    pass
            running = self._process is not None and self._process.poll() is None
            if not running:
                self.reload()
                if self.state in TERMINAL_STATES:
                    return self.state
                if self.state is ExperimentState.PAUSED:
                    raise ValueError(
                        f"Experiment {self._id} is in paused state: it stopped before its end. "
                        f"Continue it with `{self._continue_command()}`, or activate()."
                    )
                if self._process is None:
                    time.sleep(interval)  # another process runs it: poll its files
            waited += interval
            if waited % 60 < interval:
                print(
                    f"Waiting for Experiment {self._id} to complete. "
                    f"Elapsed {waited / 60:.1f} minutes",
                    file=sys.stderr,
                )

    def _continue_command(self) -> str:
        import shlex

        if self._command:
            return shlex.join(self._command[2:]).replace("det_lightning", "det-lightning", 1)
        record = self._record
        return (
            f"det-lightning experiment CONFIG {record.get('model_dir', 'MODEL_DIR')} "
            "(the same config)"
        )

    def pause(self) -> None:
        """Pauses the experiment: its state is ``PAUSED`` at once, as on Determined, for every
        client and ``det-lightning experiment list``. Its training trials stop with a
        checkpoint, as Ctrl+C stops them, and no other starts: one this client started before
        this returns; one another process runs (on any machine that shares its folder) within
        seconds of this call, which returns at once; its command then exits 1 (not 75: a
        scheduler that requeues on 75 would undo the pause). ``activate()``, or a rerun of its
        command, continues it. A completed, failed or canceled experiment stays so.

        Raises:
            CheckpointStorageError: its bucket cannot be written.
        """
        self._request_stop("pause")

    @staticmethod
    def _stop(process: subprocess.Popen) -> None:
        """Stops the experiment's command as Ctrl+C does (SIGTERM to its process group: the
        training trials checkpoint, it exits 75) and waits for it."""
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()

    def cancel(self) -> None:
        """Ends the experiment: its state is ``CANCELED``, terminal, as on Determined
        (``wait()`` returns it; every client and ``det-lightning experiment list`` see it).
        A running one stops first as Ctrl+C stops it, its training trials with a checkpoint,
        so nothing is lost: one this client started before this returns; one another process
        runs (on any machine that shares its folder) within seconds of this call, which
        returns at once, the state ``STOPPING_CANCELED`` until then. A paused experiment is
        canceled as it is; a completed or failed one stays so. ``activate()``, or a rerun of
        its command, continues it.

        Raises:
            CheckpointStorageError: its bucket cannot be written.
        """
        self._request_stop("cancel")

    def kill(self) -> None:
        """As ``cancel()`` (``STOPPING_KILLED`` while it stops): Determined's stopped the
        trials at once, without a checkpoint; here they checkpoint first, which Ctrl+C in the
        experiment's own terminal skips."""
        self._request_stop("kill")

    def _request_stop(self, how: str) -> None:
        from det_lightning._runner._record import mark_stop

        if self._process is not None:
            self._stop(self._process)  # at once, as Ctrl+C (not twice: the mark comes after)
        self.reload()
        if self.state in TERMINAL_STATES:
            return  # it completed, failed, or was canceled first: that stays its state
        if how == "pause" and self.state in (
            ExperimentState.STOPPING_CANCELED,
            ExperimentState.STOPPING_KILLED,
        ):
            return  # canceled: a pause changes nothing
        # Another process that runs it (here or on any machine sharing its folder) sees the
        # mark and stops its trials, then ends CANCELED or PAUSED (_interrupt.StopWatcher).
        mark_stop(self._root / self._id, how)
        self.reload()

    def activate(self) -> None:
        """Continues the experiment, paused or canceled: reruns its command in a process of
        its own (the trials resume from their checkpoints; a cancel or pause is taken back).
        One this client did not start gets the command from its records: its folder, the
        search storage it began with, and the model directory, config and launch flags
        (``--workers``, ``--devices``, ``--precision``, ...) of the command that last ran it,
        as Determined continues an experiment with its resources. One paused while another
        process ran it is continued once that process has stopped its trials (this waits for
        them). Nothing happens while it runs, nor once it completed.

        Raises:
            ValueError: it is stopping after a cancel (``wait()`` for it first); or its search
                is in a database whose password its record leaves out, and this client was
                not given that URL (``Determined(storage=URL)``).
            FileNotFoundError: its model directory is gone (every checkpoint keeps the code
                in its ``code/`` folder).
        """
        from det_lightning._runner._record import clear_stop, stopped_at, stopped_by
        from det_lightning._runner.search._interrupt import past

        if self._process is not None and self._process.poll() is None:
            return
        self.reload()
        self._wait_while_pausing()
        if self.state in (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED):
            raise ValueError(
                f"Experiment {self._id} is stopping: it was canceled, and the process that "
                "runs it is stopping its trials. wait() until it is CANCELED, then activate()."
            )
        if self.state in (ExperimentState.ACTIVE, ExperimentState.COMPLETED):
            return  # another process runs it, or it is done
        if not self._command:
            self._command, self._log = self._command_from_record()
            print(f"Started experiment {self._id}; its output: {self._log}", file=sys.stderr)
        # Taken back here, as the command takes it back when it starts: ACTIVE from now on,
        # for every reader, not PAUSED (CANCELED) until the command has started. (A process
        # that stopped for it goes by the mark it saw.)
        mark = clear_stop(self._root / self._id)
        if mark is not None:
            by = stopped_by(mark)
            print(
                f"Experiment {self._id} was {past(by)} ({by}() at {stopped_at(mark)}); "
                "activate() continues it.",
                file=sys.stderr,
            )
        self._process = self._session._start(self._command, self._log)
        self.reload()

    def _wait_while_pausing(self, interval: float = 0.5) -> None:
        """Waits until the process that runs the experiment has stopped its trials after a
        pause (their checkpoints written): a command started before would find them still
        held, and that process would stop whatever it had started by then."""
        waited, told = 0.0, False
        while self._pausing:
            if not told:
                print(
                    f"Experiment {self._id} was paused: waiting for its trials to stop with a "
                    "checkpoint before continuing it.",
                    file=sys.stderr,
                )
                told = True
            time.sleep(interval)
            waited += interval
            if waited % 60 < interval:
                print(f"Still waiting for experiment {self._id}'s trials to stop.", file=sys.stderr)
            self.reload()

    def _command_from_record(self) -> "Tuple[List[str], pathlib.Path]":
        """The command that continues this experiment, and its output's file, from its
        records: the folder it was found in, its search storage (``experiment.json``), the
        model directory, config and launch flags it last ran with (``launch.json``)."""
        from det_lightning._runner._record import last_launch, launch_flags, search_storage

        folder = self._root / self._id
        # The model directory, config and launch flags of the command that last ran it (its
        # record's for one begun before those were kept), and the storage its search is in.
        launch = last_launch(folder)
        model_dir = str(launch.get("model_dir") or self._record.get("model_dir") or "")
        if not model_dir or not pathlib.Path(model_dir).is_dir():
            raise FileNotFoundError(
                f"experiment {self._id}'s model directory {model_dir or '(none recorded)'} "
                "is gone: run `det-lightning experiment CONFIG MODEL_DIR --checkpoint-dir "
                f"{self._root}` with a copy of it (every checkpoint keeps the code in its "
                "code/ folder)."
            )
        config = dict(launch.get("config") or self._record.get("config") or {})
        flags = launch_flags(folder)
        storage = search_storage(self._record, self._session._storage)
        plan, command, log = self._session._launch(
            config, model_dir, str(self._root), storage=storage, flags=flags
        )
        if plan.experiment_id != self._id:  # a record edited by hand, or from a copy
            raise ValueError(
                f"experiment {self._id}'s config now names experiment {plan.experiment_id}: "
                "its record does not belong to its folder; run its command by hand."
            )
        return command, log

    def delete(self) -> None:
        """Deletes the experiment and what it wrote: its folder (checkpoints, trials' files,
        its record: on a disk at once), its studies in the search storage it began with, its
        TensorBoard files. As on Determined, only an experiment in a terminal state
        (``COMPLETED``, ``CANCELED``, ``ERROR``) is deleted; its state is then ``DELETED``.

        Raises:
            ValueError: it is active or paused (``cancel()`` it first).
            OSError: its folder could not be removed (a bucket: ``CheckpointStorageError``;
                what is left is still listed, and ``delete()`` again removes it).
        """
        self.reload()
        if self.state not in TERMINAL_STATES:
            raise ValueError(
                f"Experiment {self._id} is {self.state.name if self.state else 'unknown'}: as "
                "on Determined, only an experiment in a terminal state is deleted; cancel() "
                "it first."
            )
        from det_lightning._runner._record import RECORD_NAME, search_storage

        folder = self._root / self._id
        # A search storage of its own (not the journal in its folder): its studies go there,
        # first (left there, a new experiment of the same id would find its search done).
        storage = search_storage(self._record, self._session._storage)
        if storage:
            from det_lightning._runner.search._storage import delete_studies

            delete_studies(storage, self._id)

        folder.remove_all(last=[RECORD_NAME])  # the journal beside its checkpoints goes too
        if not folder.is_local:
            shutil.rmtree(folder.staging(), ignore_errors=True)  # its local copies, journal
        if not self._delete_tensorboard_files():
            print(
                f"Experiment {self._id} is deleted; its record did not say where its "
                f"TensorBoard files are (by default tensorboard/{self._id} where its command "
                "ran): they stay.",
                file=sys.stderr,
            )
        self.state = ExperimentState.DELETED

    def delete_tensorboard_files(self) -> None:
        """Deletes the experiment's TensorBoard files (``<tensorboard dir>/<id>``).

        Raises:
            FileNotFoundError: its record does not say where they are (an experiment begun
                before 2026-11-29), naming where they would be by default.
        """
        if not self._record:
            self.reload()
        if not self._delete_tensorboard_files():
            raise FileNotFoundError(
                f"experiment {self._id}'s record does not say where its TensorBoard files are "
                f"(it began before records did): by default tensorboard/{self._id} in the "
                "folder its command ran in, or under $DET_LIGHTNING_TENSORBOARD_DIR; remove "
                "that folder."
            )

    def _delete_tensorboard_files(self) -> bool:
        """Removes the recorded TensorBoard folder; whether the record names one."""
        where = self._record.get("tensorboard_dir")
        if not where:
            return False
        shutil.rmtree(where, ignore_errors=True)
        return True

    def download_code(self, output_dir: Optional[str] = None) -> str:
        """The experiment's model definition: its ``model_dir`` (copied into ``output_dir``
        when given), which it ran from."""
        source = pathlib.Path(str(self._record.get("model_dir") or ""))
        if not source.is_dir():
            raise FileNotFoundError(
                f"experiment {self._id}'s model directory {source} is gone; every checkpoint "
                "keeps a copy of the code in its code/ folder."
            )
        if output_dir is None:
            return str(source)
        shutil.copytree(source, output_dir, dirs_exist_ok=True)
        return str(output_dir)

    def __repr__(self) -> str:
        return f"Experiment(id={self._id!r}, state={self.state})"


for _name in (
    "archive",
    "unarchive",
    "set_name",
    "set_description",
    "set_notes",
    "add_label",
    "remove_label",
    "set_labels",
    "move_to_project",
    "get_pachyderm_config",
):

    def _needs_master(self: Any, *args: Any, _name: str = _name, **kwargs: Any) -> NoReturn:
        refuse(f"Experiment.{_name}")

    _needs_master.__name__ = _needs_master.__qualname__ = _name
    setattr(Experiment, _name, _needs_master)


__all__ = ["Experiment"]
