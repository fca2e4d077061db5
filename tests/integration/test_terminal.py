"""The terminal during a trial: log lines print above Lightning's progress bar, never onto the
end of its line, and the validation pass shows a bar of its own."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = """
import logging, sys
from det_lightning import pytorch
from tests.fixtures.trials import make_trials, seed_everything

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="LOGLINE %(message)s")
seed_everything(1)
with pytorch.init(hparams={"lr": 0.01, "n": 64}) as context:
    trial = make_trials(pytorch)["MLPTrial"](context)
    trainer = pytorch.Trainer(trial, context, enable_progress_bar=True,
                              checkpoint_dir=sys.argv[1], tensorboard_dir=sys.argv[2])
    trainer.fit(max_length=pytorch.Batch(12), reporting_period=pytorch.Batch(3),
                validation_period=pytorch.Batch(6), checkpoint_policy="none")
"""


@pytest.mark.slow
def test_log_lines_print_above_the_progress_bar(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "terminal.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    with open(out, "wb") as terminal:  # the bar (stdout) and the log (stderr) share it
        subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "ck"), str(tmp_path / "tb")],
                       stdout=terminal, stderr=terminal, env=env, cwd=tmp_path, check=True,
                       timeout=240)
    # tqdm clears a lower bar by moving down and back up (ESC [A keeps the column: 0).
    text = out.read_text(errors="replace").replace("\x1b[A", "")
    starts = [i for i in range(len(text)) if text.startswith("LOGLINE", i)]
    reports = [i for i in starts if text.startswith("LOGLINE report_", i)]
    assert len(reports) >= 6, text[-3000:]  # 4 training reports, 2 validations
    assert "Epoch 0" in text and "Validation" in text, text[-3000:]
    glued = [text[max(0, i - 60):i + 40] for i in starts if i > 0 and text[i - 1] not in "\r\n"]
    assert not glued, "log lines printed onto the bar's line:\n" + "\n".join(map(repr, glued))
