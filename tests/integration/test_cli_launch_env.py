"""``det-lightning run`` hands launch flags to an unmodified script's ``init()``."""

import pathlib
import textwrap

import pytest

from tests.integration.cli_support import output, run_cli

SCRIPT = textwrap.dedent(
    """
    import determined as det
    import torch
    from determined import pytorch

    with pytorch.init(hparams={}) as context:
        print("LAUNCH", sorted(context.engine.launch_options.trainer_kwargs().items()))
        print("DETERMINISTIC", torch.are_deterministic_algorithms_enabled())
    """
)


@pytest.mark.slow
def test_run_passes_launch_flags_to_init(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = run_cli(
        "run",
        "--accelerator",
        "cpu",
        "--precision",
        "bf16-mixed",
        "--deterministic",
        str(script),
        cwd=tmp_path,
    )
    assert result.returncode == 0, output(result)
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("LAUNCH"))
    assert "('accelerator', 'cpu')" in line and "('precision', 'bf16-mixed')" in line
    assert "('deterministic', True)" in line
    assert "DETERMINISTIC True" in result.stdout


def test_init_arguments_win_over_the_environment(tmp_path: pathlib.Path) -> None:
    from det_lightning.pytorch._launch import resolve_options

    env = {"DET_LIGHTNING_DEVICES": "0,1", "DET_LIGHTNING_ACCELERATOR": "cpu"}
    assert resolve_options({"accelerator": "auto"}, None, env)["accelerator"] == "auto"
    assert resolve_options({}, None, env)["devices"] == [0, 1]
