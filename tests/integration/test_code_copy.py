"""A checkpoint's ``code/`` holds the trial's source and nothing a run produced.

A model directory used for a while holds earlier outputs: checkpoints of other trials (each with
its own ``code/``), TensorBoard runs, Lightning logs. Copying them would nest every earlier
``code/`` in the next one and grow with each run. ``.detignore`` is honoured as Determined
honours it.
"""

import pathlib
import sys
from typing import List

import pytest

from det_lightning import pytorch
from tests.integration.test_checkpoints import FILE_TRIAL, by_steps, fit


def _files(root: pathlib.Path) -> List[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_code_leaves_out_run_output_and_what_detignore_names(
    isolated_run: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = isolated_run / "project"
    (project / "lib").mkdir(parents=True)
    (project / "model_def.py").write_text(FILE_TRIAL)
    (project / "lib" / "helpers.py").write_text("X = 1\n")
    (project / ".detignore").write_text("# large inputs\ndata/\n*.bin\n!keep.bin\n/notes.txt\n")
    (project / "data").mkdir()
    (project / "data" / "train.csv").write_text("1,2\n")
    (project / "weights.bin").write_bytes(b"0" * 10)
    (project / "keep.bin").write_bytes(b"1")
    (project / "notes.txt").write_text("mine\n")
    (project / "lib" / "notes.txt").write_text("anchored pattern: this one stays\n")
    # Output of earlier runs, under names no rule knows.
    earlier = project / "old_results" / "trial-3" / "0c4e1f7a-checkpoint"
    (earlier / "code").mkdir(parents=True)
    (earlier / "metadata.json").write_text('{"steps_completed": 4}')
    (earlier / "state_dict.pth").write_bytes(b"x")
    (earlier / "code" / "model_def.py").write_text("# an old copy\n")
    board = project / "runs" / "Nov22_10-00-00_host"
    board.mkdir(parents=True)
    (board / "events.out.tfevents.1.host.1.0").write_bytes(b"e")
    (project / "lightning_logs" / "version_0").mkdir(parents=True)
    (project / "lightning_logs" / "version_0" / "events.out.tfevents.2").write_bytes(b"e")
    (project / "lightning_logs" / "version_0" / "hparams.yaml").write_text("{}\n")

    monkeypatch.syspath_prepend(str(project))
    monkeypatch.delitem(sys.modules, "model_def", raising=False)
    import model_def  # type: ignore[import-not-found]

    root = isolated_run / "checkpoints"
    fit(
        model_def.FileTrial,
        trainer_kwargs={"checkpoint_dir": str(root)},
        max_length=pytorch.Batch(1),
        checkpoint_policy="none",
    )
    monkeypatch.delitem(sys.modules, "model_def")
    [checkpoint] = by_steps(root).values()
    assert _files(checkpoint / "code") == [
        "keep.bin",
        "lib/helpers.py",
        "lib/notes.txt",
        "model_def.py",
    ]
