"""``det-lightning experiment list``/``describe`` over the records in a checkpoint folder."""

import json
import pathlib
from typing import Any, Dict

import pytest

from det_lightning._runner import cli


def _record(root: pathlib.Path, experiment_id: str, config: Dict[str, Any], created: str) -> None:
    folder = root / experiment_id
    folder.mkdir(parents=True)
    record = {
        "id": experiment_id,
        "name": config.get("name"),
        "searcher": config["searcher"]["name"],
        "model_dir": str(root),
        "created": created,
        "config": config,
    }
    (folder / "experiment.json").write_text(json.dumps(record))


def _asha_with_time_metric() -> Dict[str, Any]:
    """As ``experiment.json`` keeps an adaptive_asha config given ``time_metric``/``max_time``:
    its defaults filled in, ``max_length: null`` among them."""
    return {
        "name": "asha",
        "entrypoint": "model_def:Trial",
        "hyperparameters": {
            "global_batch_size": 8,
            "lr": {"type": "double", "minval": 0.1, "maxval": 1.0},
        },
        "searcher": {
            "name": "adaptive_asha",
            "metric": "loss",
            "max_length": None,
            "max_trials": 4,
            "time_metric": "batches",
            "max_time": 8,
        },
    }


def test_list_and_describe_read_a_search_given_max_time(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    config = {**_asha_with_time_metric(), "resources": {"resource_pool": "gpus"}}
    _record(tmp_path, "asha-0123456789", config, "2026-11-28T10:00:00+00:00")
    assert cli.main(["experiment", "list", "--checkpoint-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr()
    assert "asha-0123456789" in listed.out and "adaptive_asha" in listed.out, listed
    assert "UNREADABLE" not in listed.out
    # The record's cluster-only keys were announced when it ran, not at each reading.
    assert "resources.resource_pool" not in caplog.text + listed.err
    code = cli.main(
        ["experiment", "describe", "asha-0123456789", "--checkpoint-dir", str(tmp_path)]
    )
    assert code == 0
    assert "searcher adaptive_asha" in capsys.readouterr().out
    assert "resources.resource_pool" not in caplog.text


def test_list_shows_every_experiment_when_one_record_cannot_be_read(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = {"name": "broken", "entrypoint": "model_def:Trial", "searcher": {"name": "single"}}
    _record(tmp_path, "broken-0123456789", broken, "2026-11-28T09:00:00+00:00")
    _record(tmp_path, "asha-0123456789", _asha_with_time_metric(), "2026-11-28T10:00:00+00:00")
    assert cli.main(["experiment", "list", "--checkpoint-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    rows = out.splitlines()
    assert rows[1].split()[:4] == ["broken-0123456789", "broken", "-", "UNREADABLE"], out
    assert rows[2].split()[:3] == ["asha-0123456789", "asha", "adaptive_asha"], out
    assert f"cannot read {tmp_path / 'broken-0123456789'}" in err
    assert "searcher.metric" in err  # what is wrong with it


def test_an_unsupported_checkpoint_dir_is_said_without_a_traceback(
    capsys: pytest.CaptureFixture,
) -> None:
    for command in (["experiment", "list"], ["checkpoint", "list"]):
        assert cli.main([*command, "--checkpoint-dir", "ftp://host/ckpts"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"det-lightning {' '.join(command)}: error: Checkpoint location ")
        assert "the scheme ftp:// is not supported" in err and "Traceback" not in err
