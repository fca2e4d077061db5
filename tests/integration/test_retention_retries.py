"""A retention deletion that fails in a plain ``fit()`` is tried again: by the next retention
pass, at ``fit()``'s end, and by the next run in the same checkpoint directory.

The failures are real and work as root (where permissions stop nothing): on a disk, a directory
named ``.<uuid>.deleting``, holding a file, where the deletion's first step renames the
checkpoint to (``os.replace`` onto a non-empty directory fails); in a bucket (moto's S3 server),
the server refusing to delete the checkpoint's marker. A checkpoint whose deletion failed stays
whole, readable under its name, and marked (``.<uuid>.unkept``) until it is gone.
"""

import logging
import pathlib
import shutil
from typing import Any, Dict, List, Set

import pytest

from det_lightning import pytorch
from det_lightning.pytorch import _checkpoint as ckpt
from det_lightning.pytorch._remote import MARKER
from tests.fixtures.object_store import S3
from tests.integration.test_checkpoints import SCORES, ScriptedMetricTrial, by_steps, fit
from tests.integration.test_object_store import checkpoints
from tests.integration.test_preemption import MLPTrial

KEEP_NEWEST = {
    "searcher": {"metric": "score", "smaller_is_better": True},
    "checkpoint_storage": {"save_trial_best": 0, "save_trial_latest": 1},
}


def _obstacle(path: pathlib.Path) -> pathlib.Path:
    """Where deleting checkpoint ``path`` renames it to first."""
    return path.parent / f".{path.name}{ckpt.DELETING_SUFFIX}"


def _mark(path: pathlib.Path) -> pathlib.Path:
    return path.parent / f".{path.name}{ckpt.UNKEPT_SUFFIX}"


class BlockedDeletions(ScriptedMetricTrial):
    """Each checkpoint at a batch in ``blocked`` gets an obstacle to its deletion as soon as it
    is written. (A class attribute, not a hyperparameter: a run that resumes with other
    hyperparameters would be another run's, which ``latest`` refuses.)"""

    blocked: Set[int] = set()

    def build_callbacks(self) -> Dict[str, Any]:
        blocked = set(self.blocked)

        class Block(pytorch.PyTorchCallback):
            def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
                path = pathlib.Path(checkpoint_dir)
                if ckpt.read_metadata(path)["steps_completed"] in blocked:
                    _obstacle(path).mkdir()
                    (_obstacle(path) / "in-the-way").write_text("")

        return {**super().build_callbacks(), "block": Block()}


class Failures(logging.Handler):
    """Sees each failed deletion as it is logged: records the checkpoint as it was then (whole,
    readable, marked), and removes the obstacle when ``clear`` (so that a retry can succeed)."""

    def __init__(self, root: pathlib.Path, clear: bool) -> None:
        super().__init__()
        self.root, self.clear = root, clear
        self.seen: List[Dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not message.startswith("Could not delete checkpoint "):
            return
        path = pathlib.Path(message[len("Could not delete checkpoint ") :].split(":")[0])
        self.seen.append(
            {
                "steps": ckpt.read_metadata(path)["steps_completed"],
                "complete": ckpt.is_complete(path),
                "marked": _mark(path).exists(),
            }
        )
        if self.clear:
            shutil.rmtree(_obstacle(path))


@pytest.fixture
def failures(checkpoint_dir: pathlib.Path, request: pytest.FixtureRequest) -> Any:
    handler = Failures(checkpoint_dir, clear=request.param)
    logger = logging.getLogger("det_lightning.pytorch")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _fit(blocked: List[int], **kwargs: Any) -> None:
    BlockedDeletions.blocked = set(blocked)
    fit(
        BlockedDeletions,
        {"lr": 0.1, "scores": SCORES},
        exp_conf=KEEP_NEWEST,
        max_length=pytorch.Batch(10),
        validation_period=pytorch.Batch(2),
        checkpoint_policy="all",
        **kwargs,
    )


@pytest.mark.parametrize("failures", [True], indirect=True)
def test_a_failed_deletion_is_retried_by_the_next_pass_and_at_the_end_of_fit(
    checkpoint_dir: pathlib.Path, failures: Failures
) -> None:
    # Checkpoints at 2, 4, ..., 10, each pass keeping the newest: 2's deletion (in the pass
    # after 4) fails once, and 8's (in the last pass, after 10) fails once.
    _fit(blocked=[2, 8])
    whole_and_marked = {"complete": True, "marked": True}
    assert failures.seen == [{"steps": 2, **whole_and_marked}, {"steps": 8, **whole_and_marked}]
    assert sorted(by_steps(checkpoint_dir)) == [10]  # 2 went in the next pass, 8 at fit()'s end
    assert sorted(p.name for p in checkpoint_dir.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("failures", [False], indirect=True)
def test_a_deletion_that_failed_to_the_end_is_finished_by_the_next_run(
    checkpoint_dir: pathlib.Path, failures: Failures, caplog: pytest.LogCaptureFixture
) -> None:
    _fit(blocked=[8])  # the obstacle stays: the last pass and fit()'s end both fail
    assert [seen["steps"] for seen in failures.seen] == [8, 8]
    eight = by_steps(checkpoint_dir)[8]
    assert sorted(by_steps(checkpoint_dir)) == [8, 10]
    assert ckpt.is_complete(eight) and _mark(eight).exists()  # whole, readable, marked
    newest = by_steps(checkpoint_dir)[10]

    caplog.set_level(logging.INFO, logger="det_lightning.pytorch")
    fit(  # a new run in the same directory, not a resume
        ScriptedMetricTrial,
        {"lr": 0.1, "scores": SCORES},
        exp_conf=KEEP_NEWEST,
        max_length=pytorch.Batch(2),
        validation_period=pytorch.Batch(2),
    )
    assert f"Finished deleting {eight}" in caplog.text
    assert not eight.exists() and not _mark(eight).exists() and not _obstacle(eight).exists()
    assert by_steps(checkpoint_dir)[10] == newest  # the first run's kept checkpoint stays
    assert sorted(by_steps(checkpoint_dir)) == [2, 10]  # and the new run's own
    assert sorted(p.name for p in checkpoint_dir.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("failures", [False], indirect=True)
def test_the_next_run_never_deletes_the_marked_checkpoint_it_resumes_from(
    checkpoint_dir: pathlib.Path, failures: Failures, caplog: pytest.LogCaptureFixture
) -> None:
    _fit(blocked=[8])
    eight = by_steps(checkpoint_dir)[8]
    newest = by_steps(checkpoint_dir)[10]
    caplog.set_level(logging.INFO, logger="det_lightning.pytorch")
    # Resumed from the marked checkpoint (by its path): it stays for the resume, and this run's
    # own retention deletes it once its first checkpoint (at 10) is there.
    _fit(blocked=[], latest_checkpoint=str(eight))
    assert f"resuming from {eight}" in caplog.text
    assert f"Finished deleting {eight}" not in caplog.text
    assert not eight.exists() and not _mark(eight).exists()
    listed = ckpt.list_local(checkpoint_dir)  # the first run's 10, and the resumed run's 10
    assert newest.name in [c.name for c in listed]
    assert sorted(c.metadata["steps_completed"] for c in listed) == [10, 10]
    assert sorted(p.name for p in checkpoint_dir.iterdir() if p.name.startswith(".")) == []


def _fit_into(url: str, batches: int) -> str:
    """A plain fit() into ``url`` (a checkpoint every 2 batches, keeping the newest); returns
    its newest checkpoint's UUID."""
    conf = {"checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 0}}
    with pytorch.init(hparams={"n": 48, "batch_size": 8}, exp_conf=conf, accelerator="cpu") as ctx:
        trainer = pytorch.Trainer(MLPTrial(ctx), ctx, logger=False, checkpoint_dir=url)
        trainer.fit(
            max_length=pytorch.Batch(batches),
            checkpoint_period=pytorch.Batch(2),
            checkpoint_policy="all",
        )
    assert trainer.result is not None and trainer.result.latest_checkpoint is not None
    return trainer.result.latest_checkpoint


def test_in_a_bucket_a_refused_deletion_is_finished_by_the_next_run(s3_server: S3) -> None:
    """The bucket refuses every marker deletion during the first fit (403, as a policy denying
    it): each checkpoint retention gives up stays whole and listed, and marked; the next run
    under the same root deletes them and keeps what retention kept."""
    url = s3_server.url("plain")
    with s3_server.refusing_deletes(f"/{MARKER}") as refused:
        newest = _fit_into(url, 8)  # checkpoints at 2, 4, 6, 8
    assert len(refused) == 1 + 2 + 3 + 3  # each pass after 4, 6 and 8 again, and fit()'s end
    left = checkpoints(s3_server, "plain")
    assert len(left) == 4 and all(MARKER in files for files in left.values())
    marks = [key for key in s3_server.keys("plain") if key.endswith(ckpt.UNKEPT_SUFFIX)]
    assert sorted(marks) == sorted(
        f".{uuid}{ckpt.UNKEPT_SUFFIX}" for uuid in left if uuid != newest
    )

    second = _fit_into(url, 2)  # a new run under the same root
    assert sorted(checkpoints(s3_server, "plain")) == sorted([newest, second])
    assert not [key for key in s3_server.keys("plain") if key.endswith(ckpt.UNKEPT_SUFFIX)]
