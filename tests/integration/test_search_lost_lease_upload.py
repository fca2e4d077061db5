"""A trial taken over while its checkpoint uploads: the stale owner publishes nothing more.

Worker A trains a search's trial into a bucket (moto's S3 server) and holds its lease in the
search's storage (a journal file, or PostgreSQL). While A's second checkpoint uploads, after its
files and before its marker, worker B takes the trial over, through the same publish check
(``_store.publish_check``) the runner registers, so the takeover happens at exactly that point.
A's upload then writes no marker and removes its files; A's ``fit()`` ends with ``LeaseLost``
(as a trial whose lease is lost ends), and B sees the checkpoints it saw when it took over.
"""

import contextlib
import gc
import json
import pathlib
from typing import Any, Callable, Iterator, List, Tuple

import optuna
import pytest

from det_lightning import pytorch
from det_lightning._env import SEARCH_ENV
from det_lightning._runner._asha import Bracket
from det_lightning._runner._lease import (
    CONTINUES,
    LeaseKeeper,
    LeaseLost,
    LeaseSettings,
    take_over,
)
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner.search._child import reporting_to_search, search_environment
from det_lightning._runner.search._storage import open_storage, storage_ref
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._remote import MARKER, ObjectStore
from det_lightning.pytorch._store import publish_check
from tests.fixtures.object_store import S3
from tests.fixtures.postgres import ConnectionCounter, PostgresServer
from tests.integration.search_support import eventually
from tests.integration.test_object_store import checkpoints
from tests.integration.test_preemption import HPARAMS, MLPTrial

SETTINGS = SearchSettings("validation_loss", True, "batches", 8, 1, 4.0, [Bracket(0, 1, 1, ())])
KEEP_ALL = {"checkpoint_storage": {"save_trial_latest": 10, "save_trial_best": 10}}


class TakeOverAtSecondMarker:
    """A publish check registered before the runner's: at the second marker (A's second
    checkpoint, its files uploaded) worker B takes the trial over, through its own storage."""

    def __init__(self, study_b: optuna.Study, s3: S3, prefix: str) -> None:
        self.study_b, self.s3, self.prefix = study_b, s3, prefix
        self.calls = 0
        self.continuation: Any = None
        self.unmarked_then: List[str] = []

    def __call__(self) -> None:
        self.calls += 1
        if self.calls != 2:
            return
        written = checkpoints(self.s3, self.prefix)
        self.unmarked_then = [uuid for uuid, files in written.items() if MARKER not in files]
        (frozen,) = self.study_b.get_trials(deepcopy=False)
        self.continuation = take_over(self.study_b, frozen)


def _close_databases() -> None:
    """Closes every live Optuna database storage's pooled connections now, not in the GC: the
    trial's own (its reporter's, its publish check's) close with its process in a search."""
    for found in gc.get_objects():
        if type(found) is optuna.storages.RDBStorage:
            found.engine.dispose()


def _search_of_one_trial(
    url: str, root: Any, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> Tuple[optuna.Study, optuna.Trial, optuna.Study]:
    """A search's one trial, in this process's environment as a trial's process has it:
    worker A's study and trial, and worker B's own view of the same study."""
    study_a = optuna.create_study(study_name="s", storage=open_storage(url, root))
    trial = study_a.ask()
    study_b = optuna.load_study(study_name="s", storage=open_storage(url, root))  # B's own
    spec = search_environment(
        storage_ref(url, root), "s", trial._trial_id, SETTINGS, bracket=SETTINGS.brackets[0]
    )
    monkeypatch.setenv(SEARCH_ENV, spec)
    monkeypatch.setenv("DET_LIGHTNING_SYNC_CHECKPOINTS", "1" if sync else "0")
    return study_a, trial, study_b


@contextlib.contextmanager
def _worker_a_loses_its_lease(
    study_a: optuna.Study, trial: optuna.Trial, takeover: Callable[[], None], root: Any
) -> Iterator[None]:
    """Worker A trains the trial (a checkpoint every 2 batches) holding its lease, with
    ``takeover`` as a publish check before the runner's; its fit() must end with LeaseLost.
    The block runs after the fit, lease and checks still in place."""
    with LeaseKeeper(study_a, trial._trial_id, LeaseSettings(3600)):
        with publish_check(takeover), reporting_to_search():
            with pytorch.init(hparams=dict(HPARAMS), exp_conf=KEEP_ALL, accelerator="cpu") as ctx:
                trainer = pytorch.Trainer(
                    MLPTrial(ctx), ctx, logger=False, checkpoint_dir=str(root)
                )
                with pytest.raises(LeaseLost, match="taken over by another worker"):
                    trainer.fit(
                        max_length=pytorch.Batch(8),
                        checkpoint_period=pytorch.Batch(2),
                        checkpoint_policy="all",
                    )
            yield


@pytest.mark.parametrize(
    "storage_kind, sync",
    [
        pytest.param("journal", False, id="journal-background-upload"),
        pytest.param("journal", True, id="journal-upload-in-training-thread"),
        pytest.param("postgres", False, id="postgres", marks=pytest.mark.slow),
    ],
)
def test_a_checkpoint_uploading_when_the_trial_is_taken_over_is_never_published(
    s3_server: S3,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    storage_kind: str,
    sync: bool,
) -> None:
    url = str(tmp_path / "search.journal")
    if storage_kind == "postgres":
        url = request.getfixturevalue("postgres_url")
    prefix = "search/trial-1"
    root = ObjectStore(s3_server.url(prefix))
    study_a, trial, study_b = _search_of_one_trial(url, root, monkeypatch, sync)
    takeover = TakeOverAtSecondMarker(study_b, s3_server, prefix)

    with _worker_a_loses_its_lease(study_a, trial, takeover, root):
        (first,) = [c.name for c in root.complete()]
        with pytest.raises(LeaseLost):  # nor does A delete what B may resume from
            root.delete(first)
        _close_databases()  # while the trial's storages are alive

    assert takeover.calls == 3  # the two markers, then the deletion
    assert takeover.continuation is not None
    assert len(takeover.unmarked_then) == 1  # B took over mid-upload: files there, no marker
    (second,) = takeover.unmarked_then
    # The second checkpoint never appeared for any reader, and nothing of it is left.
    assert list(checkpoints(s3_server, prefix)) == [first]
    assert MARKER in checkpoints(s3_server, prefix)[first]
    assert not [k for k in s3_server.keys(prefix) if k.startswith(second)]
    assert sorted(p.name for p in root.staging().iterdir()) == [first]
    # What B resumes from is the checkpoint there was when it took over.
    latest = root.latest()
    assert isinstance(latest, ObjectStore) and latest.name == first
    assert (
        json.loads(s3_server.fs.cat(f"{s3_server.bucket}/{prefix}/{first}/{MARKER}"))[
            "steps_completed"
        ]
        == 2
    )
    (old, new) = study_b.get_trials(deepcopy=False)
    assert old.state == optuna.trial.TrialState.FAIL
    assert (
        new.state == optuna.trial.TrialState.RUNNING
        and new.user_attrs[CONTINUES] == trial._trial_id
    )
    _close_databases()


class TakeOverAtSecondRename:
    """The local root's version of ``TakeOverAtSecondMarker``: at the second publish check
    (A's second checkpoint written and fsynced in its hidden partial directory, not yet
    renamed) worker B takes the trial over."""

    def __init__(self, study_b: optuna.Study, root: pathlib.Path) -> None:
        self.study_b, self.root = study_b, root
        self.calls = 0
        self.continuation: Any = None
        self.partials_then: List[str] = []

    def __call__(self) -> None:
        self.calls += 1
        if self.calls != 2:
            return
        self.partials_then = sorted(p.name for p in self.root.iterdir() if p.name.startswith("."))
        (frozen,) = self.study_b.get_trials(deepcopy=False)
        self.continuation = take_over(self.study_b, frozen)


@pytest.mark.parametrize(
    "sync", [False, True], ids=["background-write", "write-in-training-thread"]
)
def test_a_checkpoint_on_a_shared_disk_is_never_renamed_into_place_after_a_takeover(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """On a local or shared-disk root the rename publishes a checkpoint: the publish checks run
    right before it, so a stale owner's checkpoint never appears and its partial directory is
    removed; A's fit() ends with LeaseLost and B resumes from the checkpoint there was."""
    root = tmp_path / "checkpoints" / "trial-1"
    study_a, trial, study_b = _search_of_one_trial(
        str(tmp_path / "search.journal"), root, monkeypatch, sync
    )
    takeover = TakeOverAtSecondRename(study_b, root)

    with _worker_a_loses_its_lease(study_a, trial, takeover, root):
        pass

    assert takeover.calls == 2 and takeover.continuation is not None
    assert len(takeover.partials_then) == 1  # the second one, written, not yet renamed
    (first,) = [c.name for c in ckpt.list_local(root)]
    assert sorted(p.name for p in root.iterdir()) == [first]  # no partial left behind
    assert ckpt.read_metadata(root / first)["steps_completed"] == 2
    latest = ckpt.latest_checkpoint(root)
    assert latest is not None and pathlib.Path(latest).name == first
    (old, new) = study_b.get_trials(deepcopy=False)
    assert old.state == optuna.trial.TrialState.FAIL
    assert new.state == optuna.trial.TrialState.RUNNING


@pytest.mark.slow
def test_a_trials_process_holds_one_database_connection(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    postgres_server: PostgresServer,
    postgres_url: str,
) -> None:
    """The trial's reporter (each validation) and its publish check (each checkpoint) share the
    process's one storage of the search: one pool, at most one connection open at a time, and
    none left open once it has been idle for the pool's linger (``pg_stat_activity``)."""
    from sqlalchemy import pool as sa_pool

    from det_lightning._runner.search import _pool

    root = tmp_path / "checkpoints" / "trial-1"
    database = postgres_url.rsplit("/", 1)[1]
    study_a, _, _ = _search_of_one_trial(postgres_url, root, monkeypatch, sync=True)
    _pool.close_idle_connections()  # what setting the search up left open in this process
    before = postgres_server.connections(database)  # the workers' (none while idle)
    pools: List[Any] = []
    made = _pool.OneConnectionPool.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        pools.append(self)
        made(self, *args, **kwargs)

    monkeypatch.setattr(_pool.OneConnectionPool, "__init__", counted)
    try:
        with ConnectionCounter(sa_pool.Pool) as count, reporting_to_search():
            with pytorch.init(hparams=dict(HPARAMS), exp_conf=KEEP_ALL, accelerator="cpu") as ctx:
                trainer = pytorch.Trainer(
                    MLPTrial(ctx), ctx, logger=False, checkpoint_dir=str(root)
                )
                trainer.fit(
                    max_length=pytorch.Batch(4),
                    validation_period=pytorch.Batch(2),
                    checkpoint_period=pytorch.Batch(2),
                    checkpoint_policy="all",
                )
            assert count.peak == 1, count.peak
            eventually(lambda: count.live == 0, "the trial's connection to close after its linger")
        (reported,) = study_a.get_trials(deepcopy=False)
        assert sorted(reported.intermediate_values) == [2, 4]  # the reporter's validations
        assert len(ckpt.list_local(root)) == 2  # each published after the check
        assert len(pools) == 1, pools  # the reporter's and the publish check's: one storage
        _pool.close_idle_connections()  # this test's own read just now
        assert postgres_server.connections(database) == before  # idle: it holds none
    finally:
        _close_databases()
