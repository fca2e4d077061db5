"""A trial's hyperparameters for TensorBoard's HParams view, read back from the event files."""

import pathlib
from typing import Any, Dict, List, Tuple

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from det_lightning._runner._tensorboard import write_hparams


def read_hparams_view(run_dir: pathlib.Path) -> Tuple[Dict[str, Any], List[str], List[str]]:
    """The session's hyperparameters, the experiment's metric tags, and the run's scalar tags."""
    events = EventAccumulator(str(run_dir))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    session = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/experiment"]
    ).experiment
    values = {
        name: getattr(value, value.WhichOneof("kind")) for name, value in session.hparams.items()
    }
    return values, [m.name.tag for m in experiment.metric_infos], events.Tags()["scalars"]


def test_nested_hyperparameters_are_written_flat_and_once(tmp_path: pathlib.Path) -> None:
    run = tmp_path / "tensorboard" / "exp" / "trial-3"
    hparams = {
        "global_batch_size": 16,
        "optimizer": {"lr": 0.01, "nesterov": True, "name": "sgd"},
        "layers": [64, 32],
        "act": None,
    }
    assert write_hparams(run, hparams, "accuracy", "trial-3")
    values, metrics, _ = read_hparams_view(run)
    assert values == {
        "global_batch_size": 16.0,
        "optimizer.lr": 0.01,
        "optimizer.nesterov": True,
        "optimizer.name": "sgd",
        "layers": "[64, 32]",
        "act": "null",
    }
    assert metrics == ["Determined/val_accuracy"]
    # A resumed trial (or a rerun) finds them and writes nothing more.
    assert not write_hparams(run, {"global_batch_size": 32}, "accuracy", "trial-3")
    assert len(list(run.iterdir())) == 1
    assert read_hparams_view(run)[0]["global_batch_size"] == 16.0
