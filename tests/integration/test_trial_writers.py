"""What a trial writes to TensorBoard itself lands in the trial's own run, and the Determined
names real trials import for it (and beside it) exist.

A trial asks for its writer in ``__init__``, before ``Trainer(..., tensorboard_dir=...)`` (or
``det-lightning experiment``, which gives each trial ``tensorboard/<experiment>/trial-<n>``)
says where the run is: the writer must follow, not stay at ``init()``'s default directory.
"""

import os
import pathlib
import subprocess
import sys
from typing import Any, Dict

import pytest

from det_lightning import errors, pytorch
from tests.fixtures.trials import make_trials
from tests.integration.test_logging_and_seeds import scalars

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
MLPTrial: Any = make_trials(pytorch)["MLPTrial"]


class WritingTrial(MLPTrial):  # type: ignore[misc, valid-type]
    """Takes its writers in ``__init__``, as Determined's examples do, and writes every batch."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.writer = context.get_tensorboard_writer()
        with pytest.warns(FutureWarning, match="TorchWriter"):
            from det_lightning.tensorboard.metric_writers.pytorch import TorchWriter

            self.logger = TorchWriter()

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        self.writer.add_scalar("trial/own", float(batch_idx), batch_idx)
        self.logger.writer.add_scalar("trial/torchwriter", 2.0 * batch_idx, batch_idx)
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_writers_made_in_init_write_to_the_run_the_trainer_chose(tmp_path: pathlib.Path) -> None:
    default_dir = pathlib.Path(os.environ["DET_LIGHTNING_TENSORBOARD_DIR"])
    run_dir = tmp_path / "experiment" / "trial-1"
    with pytorch.init(hparams={"lr": 0.01}) as context:
        trial = WritingTrial(context)
        pytorch.Trainer(trial, context, tensorboard_dir=str(run_dir)).fit(
            max_length=pytorch.Batch(4), checkpoint_policy="none"
        )
    found = scalars(run_dir)
    assert found["trial/own"] == [(b, float(b)) for b in range(4)]
    assert sorted(found["trial/torchwriter"]) == [(b, 2.0 * b) for b in range(4)]
    assert "Determined/loss" in found  # the trainer's metrics: the same run
    assert not list(default_dir.rglob("events.out.tfevents.*")), "files at init()'s default"


def test_a_writer_used_after_the_directory_changes_follows_it(tmp_path: pathlib.Path) -> None:
    with pytorch.init(hparams={}) as context:
        context.engine.tensorboard_path = tmp_path / "first"
        writer = context.get_tensorboard_writer()
        assert not (tmp_path / "first").exists()  # nothing is opened before the first write
        writer.add_scalar("a", 1.0, 0)
        context.engine.tensorboard_path = tmp_path / "second"
        writer.add_scalar("a", 2.0, 1)
        assert writer.get_logdir() == str(tmp_path / "second")
        writer.close()
    assert scalars(tmp_path / "first") == {"a": [(0, 1.0)]}
    assert scalars(tmp_path / "second") == {"a": [(1, 2.0)]}


def test_torchwriter_outside_init_names_the_fix() -> None:
    from det_lightning.tensorboard.metric_writers.pytorch import TorchWriter

    with pytest.warns(FutureWarning), pytest.raises(errors.InternalException, match="init"):
        TorchWriter()


def test_client_calls_that_need_a_master_say_so() -> None:
    from det_lightning.experimental import Checkpoint, Model, client

    with pytest.raises(errors.NotProvidedError, match="get_model is not provided.*master"):
        client.get_model("mnist")
    with pytest.raises(ImportError, match="model registry needs"):
        from det_lightning.experimental import ModelSortBy  # noqa: F401
    with pytest.raises(NotImplementedError, match="Checkpoint.*get_checkpoint"):
        Checkpoint(None, "some-uuid")
    with pytest.raises(NotImplementedError, match="Model needs a Determined master"):
        Model()
    with pytest.raises(AttributeError):
        client.get_modle  # noqa: B018  a typo is an AttributeError, not a refusal


TRIAL_FILE = """
from typing import Any
import torch
import determined as det
from determined import pytorch
from determined.experimental import client
from determined.experimental.client import Checkpoint
from determined.tensorboard.metric_writers.pytorch import TorchWriter


class Trial(pytorch.PyTorchTrial):
    def __init__(self, context: det.TrialContext) -> None:
        assert isinstance(context, det.TrialContext)
        self.context = context
        self.logger = TorchWriter()
        self.model = context.wrap_model(torch.nn.Linear(2, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

    def build_training_data_loader(self) -> Any:
        x = torch.ones(16, 2)
        return pytorch.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                  batch_size=4)

    def build_validation_data_loader(self) -> Any:
        return self.build_training_data_loader()

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        self.logger.writer.add_scalar("legacy", float(batch_idx), batch_idx)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> Any:
        x, y = batch
        return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}
"""

CONFIG = """
name: writers
entrypoint: model_def:Trial
hyperparameters:
  global_batch_size: 4
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 3
"""


@pytest.mark.slow
def test_an_unmodified_trial_importing_these_names_runs_as_an_experiment(
    tmp_path: pathlib.Path, isolated_run: pathlib.Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "model_def.py").write_text(TRIAL_FILE)
    (project / "const.yaml").write_text(CONFIG)
    work = isolated_run
    env: Dict[str, str] = dict(os.environ)
    env.pop("DET_LIGHTNING_TENSORBOARD_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore::FutureWarning",
            "-m",
            "det_lightning",
            "experiment",
            str(project / "const.yaml"),
            str(project),
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    [run_dir] = [p for p in (work / "tensorboard").iterdir()]
    assert run_dir.name.startswith("writers-")
    found = scalars(run_dir / "trial-1")
    assert found["legacy"] == [(b, float(b)) for b in range(3)]
    assert "Determined/loss" in found
    assert [p.name for p in run_dir.iterdir()] == ["trial-1"]
