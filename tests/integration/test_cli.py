"""``det-lightning run`` and the CLI itself: Trainer-API scripts that ``import determined``,
unmodified. Everything that installs the alias runs in a child process (see cli_support)."""

import os
import pathlib
import sys
import textwrap

import pytest

from det_lightning import compat
from det_lightning._runner import cli as _cli
from tests.integration.cli_support import (
    PROJECT,
    REPO_ROOT,
    VALIDATION_LOG_ENV,
    load_checkpoint,
    output,
    project_files,
    read_validation_log,
    run_cli,
)


def test_run_trains_a_determined_script_and_its_checkpoint_loads(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    """train.py does ``import determined as det`` and takes its local branch."""
    before = project_files()
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "run",
        str(PROJECT / "train.py"),
        "--batches",
        "6",
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
    )
    assert result.returncode == 0, output(result)
    validations = read_validation_log(log)
    assert [v["batches"] for v in validations] == [4, 6]  # validation_period Batch(4)
    checkpoints = list(checkpoint_dir.iterdir())
    # The best checkpoint and the latest are kept: one when batch 6's validation beats batch
    # 4's (the end's checkpoint is the best), else two. The weights start at random, as
    # Determined's local mode leaves them: about 1 run in 100 does not improve.
    improved = validations[1]["validation_loss"] < validations[0]["validation_loss"]
    assert len(checkpoints) == (1 if improved else 2), (validations, checkpoints)

    loaded = load_checkpoint(checkpoints[0], "trial_class", cwd=isolated_run)
    assert loaded["class"] == "model_def.RegressionTrial" and loaded["is_trial"]
    assert loaded["hparams"] == {"global_batch_size": 8, "learning_rate": 0.05, "hidden_size": 8}
    assert loaded["keys"] and loaded["max_weight_difference"] == 0.0
    assert project_files() == before


@pytest.mark.slow
def test_console_script_runs_the_mnist_example_as_is(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    console_script = pathlib.Path(sys.executable).with_name("det-lightning")
    assert console_script.exists(), "pip install -e . declares the det-lightning console script"
    result = run_cli(
        "run",
        str(REPO_ROOT / "examples" / "mnist" / "train.py"),
        "--epochs",
        "1",
        cwd=isolated_run,
        command=[str(console_script)],
    )
    assert result.returncode == 0, output(result)
    assert "report_validation_metrics(steps_completed=64" in result.stderr  # 4096 / 64 records
    assert any((p / "state_dict.pth").exists() for p in checkpoint_dir.iterdir())


def test_run_gives_the_script_its_argv_the_alias_and_no_cluster(isolated_run: pathlib.Path) -> None:
    (isolated_run / "pkg").mkdir()
    (isolated_run / "pkg" / "__init__.py").write_text("")
    (isolated_run / "pkg" / "probe.py").write_text(
        textwrap.dedent("""
        import sys
        import determined as det
        from determined import pytorch
        print("probe", det.__name__, pytorch.__name__, det.get_cluster_info(), sys.argv[1:])
        sys.exit(int(sys.argv[1]))
    """)
    )
    (isolated_run / "script.py").write_text("from pkg import probe\n")
    result = run_cli("run", "script.py", "3", "--flag", cwd=isolated_run)
    assert result.returncode == 3, output(result)
    assert "probe det_lightning det_lightning.pytorch None ['3', '--flag']" in result.stdout

    result = run_cli("run", "-m", "pkg.probe", "0", cwd=isolated_run)
    assert result.returncode == 0, output(result)
    assert "probe det_lightning det_lightning.pytorch None ['0']" in result.stdout


def test_a_python_the_script_starts_imports_det_lightning_as_determined(
    isolated_run: pathlib.Path,
) -> None:
    """As where Determined was installed: a helper the script runs with ``python3`` (this
    installation's, first on ``PATH``) imports det_lightning, even beside the real one."""
    (isolated_run / "helper.py").write_text(
        "import sys, determined\nprint('helper', determined.__name__, sys.executable)\n"
    )
    (isolated_run / "script.py").write_text(
        "import subprocess\nsubprocess.run(['python3', 'helper.py'], check=True)\n"
    )
    result = run_cli("run", "script.py", cwd=isolated_run)
    assert result.returncode == 0, output(result)
    _, name, executable = result.stdout.split()
    assert name == "det_lightning", output(result)
    assert os.path.dirname(executable) == os.path.dirname(sys.executable), output(result)


def test_run_refuses_when_the_real_determined_is_already_imported(
    isolated_run: pathlib.Path,
) -> None:
    (isolated_run / "script.py").write_text("print('script ran')\n")
    code = (
        "import sys, determined\n"
        "from det_lightning._runner.cli import main\n"
        "sys.exit(main(['run', 'script.py']))\n"
    )
    result = run_cli(cwd=isolated_run, command=[sys.executable, "-c", code])
    assert result.returncode == 1, output(result)
    assert "script ran" not in result.stdout
    assert result.stderr.startswith(
        "det-lightning run: error: The real 'determined' package is already imported"
    ), output(result)
    assert "Traceback" not in result.stderr


def test_run_missing_script_is_a_usage_error(
    isolated_run: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    assert _cli.main(["run", "no_such_script.py"]) == 2
    assert (
        "det-lightning run: error: can't open file 'no_such_script.py'" in capsys.readouterr().err
    )
    assert not compat.is_installed()


def test_checkpoint_dispatches_to_export(
    isolated_run: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    # A missing input is a usage error (2), as a missing script for `run`.
    assert _cli.main(["checkpoint", "convert", str(isolated_run / "missing"), "out.ckpt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("det-lightning checkpoint convert: "), err
    assert "missing: no such file." in err, err
    assert not (isolated_run / "out.ckpt").exists()


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.new_interpreters  # the CLI's launcher: det-lightning run under torchrun
def test_run_with_two_devices_starts_two_aliased_processes(
    isolated_run: pathlib.Path, checkpoint_dir: pathlib.Path
) -> None:
    log = isolated_run / "validations.jsonl"
    result = run_cli(
        "run",
        "--devices",
        "2",
        "--accelerator",
        "cpu",
        str(PROJECT / "train.py"),
        "--batches",
        "6",
        cwd=isolated_run,
        env={VALIDATION_LOG_ENV: str(log)},
    )
    assert result.returncode == 0, output(result)
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in result.stderr, output(result)
    assert "GLOBAL_RANK: 1" not in result.stderr, output(result)  # each line once: the chief's
    # Both processes ran the unmodified script (ValidationLog runs on every rank).
    assert sorted(v["batches"] for v in read_validation_log(log)) == [4, 4, 6, 6]
    checkpoints = list(checkpoint_dir.iterdir())
    assert len(checkpoints) == 1, checkpoints
    loaded = load_checkpoint(checkpoints[0], "trial_class", cwd=isolated_run)
    assert loaded["max_weight_difference"] == 0.0


def test_torchrun_command() -> None:
    assert _cli.torchrun_command({"devices": 1}, {}, ["run", "t.py"]) is None
    assert _cli.torchrun_command({"devices": "0,1"}, {}, ["run", "t.py"]) is None
    assert _cli.torchrun_command({"devices": 2}, {"TORCHELASTIC_RUN_ID": "x"}, ["run"]) is None
    assert _cli.torchrun_command({"devices": 4}, {"SLURM_NTASKS": "8"}, ["run"]) is None
    command = _cli.torchrun_command(
        {"devices": 2, "num_nodes": 3},
        {"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1"},
        ["run", "t.py"],
    )
    assert command is not None and command[0] == sys.executable
    assert command[2:] == [
        "det_lightning._runner._torchrun",  # torchrun, quiet when a signal stops it
        "--nproc-per-node=2",
        "--nnodes=3",
        "--node-rank=1",
        "--master-addr=10.0.0.1",
        "--master-port=29500",
        "-m",
        "det_lightning",
        "run",
        "t.py",
    ]
    with pytest.raises(ValueError, match="--num-nodes 3 needs MASTER_ADDR and NODE_RANK"):
        _cli.torchrun_command({"devices": 2, "num_nodes": 3}, {}, ["run"])


def test_launch_flags_come_before_the_script() -> None:
    args = _cli.build_parser().parse_args(
        ["run", "--devices", "2", "--precision", "bf16-mixed", "train.py", "--devices", "3"]
    )
    assert (args.devices, args.precision, args.target) == (2, "bf16-mixed", "train.py")
    assert args.script_args == ["--devices", "3"]  # the script's own flags are left to it
    args = _cli.build_parser().parse_args(
        ["experiment", "--num-nodes", "1", "--accelerator", "cpu", "c.yaml", "."]
    )
    assert _cli._launch_options(args) == {"accelerator": "cpu", "num_nodes": 1}


def test_no_command_prints_usage(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _cli.main([])
    assert exit_info.value.code == 2
    assert "usage: det-lightning" in capsys.readouterr().err
