"""The ``det-lightning`` command's conventions, in this process: ``--version``, the exit statuses
in ``--help``, argparse's one-line errors for bad launch options (before anything starts), and
``experiment --config KEY=VALUE`` overrides typed and checked by the config schema."""

import importlib.metadata
import pathlib
import types
from typing import List, Tuple

import pytest
import torch

import det_lightning
from det_lightning import compat, errors
from det_lightning._env import TRIAL_INFO_ENV
from det_lightning._info import ClusterInfo, TrialInfo
from det_lightning._job_processes import is_chief, oversubscribed
from det_lightning._runner import _overrides
from det_lightning._runner import cli as _cli
from det_lightning._runner._launch_checks import launch_problem
from det_lightning._runner.search._child import SearcherLengthCheck
from det_lightning.pytorch import Batch, Epoch, TrainUnit
from det_lightning.pytorch._engine_state import EngineState

CONST = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "determined_project"


def _exit(argv: List[str], capsys: pytest.CaptureFixture) -> Tuple[object, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        _cli.main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_version_is_the_package_version_with_lightning_and_torch(
    capsys: pytest.CaptureFixture,
) -> None:
    code, out, _ = _exit(["--version"], capsys)
    first, second = out.splitlines()
    assert code == 0
    assert first == f"det-lightning {det_lightning.__version__}"
    # Single-sourced: what pip installed is what the package says.
    assert det_lightning.__version__ == importlib.metadata.version("det-lightning")
    assert f"lightning {importlib.metadata.version('lightning')}" in second
    assert f"torch {torch.__version__}" in second


def test_version_names_torchs_build_where_its_metadata_does_not(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyPI's CUDA wheels say ``2.13.0`` in their metadata where ``torch.__version__`` is
    ``2.13.0+cu130``: ``--version`` reads torch's ``version.py``, and falls back to the
    metadata where that file is not there."""
    from det_lightning._runner import _cli_text

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("__version__ = '9.8.7+cu999'\ncuda = '99.9'\n")
    real = importlib.metadata.distribution

    class Wheel:
        version = "9.8.7"  # what a CUDA wheel's metadata says

        def __init__(self, root: pathlib.Path) -> None:
            self.root = root

        def locate_file(self, name: str) -> pathlib.Path:
            return self.root / name

    def distribution(name: str) -> object:
        return Wheel(tmp_path) if name == "torch" else real(name)

    monkeypatch.setattr(_cli_text.importlib.metadata, "distribution", distribution)
    assert "torch 9.8.7+cu999, " in _cli_text.version_text()
    (tmp_path / "torch" / "version.py").unlink()
    assert "torch 9.8.7, " in _cli_text.version_text()


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["experiment", "--help"]])
def test_help_ends_with_the_exit_statuses(argv: List[str], capsys: pytest.CaptureFixture) -> None:
    code, out, _ = _exit(argv, capsys)
    assert code == 0
    statuses = out[out.index("exit status:") :].splitlines()
    listed = [line.split()[0] for line in statuses[1:] if line.split()]
    assert [word for word in listed if word.isdigit()] == ["0", "1", "2", "75"]


def test_run_alone_names_the_missing_script(capsys: pytest.CaptureFixture) -> None:
    code, _, err = _exit(["run"], capsys)
    assert code == 2
    assert err.splitlines()[-1] == (
        "det-lightning run: error: the following arguments are required: SCRIPT"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--devices", "abc"], "argument --devices: 'abc' is not a device count"),
        (["--devices", "0"], "argument --devices: '0' is not a device count"),
        (["--num-nodes", "0"], "argument --num-nodes/--num_nodes: '0' is not a number of nodes"),
        (["--accelerator", "cpu", "--devices", "0,1"], "argument --devices: '0,1': a list"),
        # More GPUs than any machine has: refused with or without CUDA here.
        (["--accelerator", "gpu", "--devices", "4096"], "GPU"),
    ],
)
def test_bad_launch_options_are_usage_errors_before_anything_starts(
    argv: List[str], message: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    script = tmp_path / "script.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    for command in (["run", *argv, str(script)], ["experiment", *argv, "c.yaml", "."]):
        code, _, err = _exit(command, capsys)
        assert code == 2
        last = err.splitlines()[-1]
        assert last.startswith(f"det-lightning {command[0]}: error: "), err
        assert message in last, err
        assert "Traceback" not in err
    assert not (tmp_path / "ran").exists()
    assert not compat.is_installed()


def test_accelerator_gpu_without_a_gpu() -> None:
    assert "has no CUDA GPU" in str(launch_problem({"accelerator": "gpu"}, gpus=0))
    assert launch_problem({"accelerator": "gpu", "devices": 2}, gpus=2) is None
    assert "has 1 GPU;" in str(launch_problem({"accelerator": "cuda", "devices": 2}, gpus=1))


def test_more_processes_than_cores_or_gpus_is_a_warning() -> None:
    cpu = oversubscribed(processes=3, asked="--devices 3", on_gpu=False, cpus=2, gpus=0)
    assert cpu.startswith("warning: --devices 3 starts 3 processes on 2 CPU cores")
    gpu = oversubscribed(
        processes=8, asked="resources.slots_per_trial: 8", on_gpu=True, cpus=64, gpus=4
    )
    assert gpu.startswith("warning: resources.slots_per_trial: 8 starts 8 processes on 4 GPUs")
    assert oversubscribed(processes=4, asked="-", on_gpu=True, cpus=2, gpus=4) == ""
    assert oversubscribed(processes="auto", asked="-", on_gpu=False, cpus=2, gpus=0) == ""


def test_the_chief_is_rank_0_of_whichever_launcher() -> None:
    assert is_chief({}) and is_chief({"RANK": "0", "LOCAL_RANK": "0"})
    assert not is_chief({"RANK": "3"})
    assert not is_chief({"LOCAL_RANK": "1"})  # Lightning's launcher sets no RANK
    assert not is_chief({"SLURM_NTASKS": "2", "SLURM_PROCID": "1"})


# ----- --config KEY=VALUE ------------------------------------------------------------------


def test_overrides_are_typed_as_determined_reads_them() -> None:
    config = _overrides.load_with_overrides(
        CONST / "const.yaml",
        [
            "searcher.max_length.batches=100",
            "hyperparameters.learning_rate=1e-3",
            "hyperparameters.hidden_size=16",
            "name=2024",
            "debug=true",
            "labels=a,b",
        ],
        announce=False,
    )
    assert config.searcher["max_length"] == {"batches": 100}
    assert config.hyperparameters["learning_rate"] == 0.001
    assert config.hyperparameters["hidden_size"] == 16
    assert config.name == "2024"  # the schema wants a string: the text as written
    assert config.raw["debug"] is True
    assert config.raw["labels"] == ["a", "b"]
    assert config.searcher["name"] == "single"  # the rest of the file is kept


def test_an_override_merges_into_a_mapping_and_leaves_the_file_alone() -> None:
    base = {"searcher": {"name": "single", "max_length": {"batches": 9}}, "slurm": None}
    merged = _overrides.apply_overrides(base, ["searcher.metric=loss", "slurm.gpu_type=a100"])
    assert merged["searcher"] == {"name": "single", "max_length": {"batches": 9}, "metric": "loss"}
    assert merged["slurm"] == {"gpu_type": "a100"}
    assert base["searcher"] == {"name": "single", "max_length": {"batches": 9}}


@pytest.mark.parametrize(
    "override, message",
    [
        # An override's error names its flag, not the file it was laid over.
        (
            "searcher.max_lenght.batches=1",
            "error: --config 'searcher.max_lenght.batches=1': searcher.max_lenght: unknown key. "
            "Did you mean",
        ),
        (
            "resources.slots_per_trial=two",
            "error: --config 'resources.slots_per_trial=two': resources.slots_per_trial: "
            "expected integer",
        ),
        ("searcher", "--config 'searcher': expected KEY=VALUE"),
        ("hyperparameters.lr=[1, 2", "--config 'hyperparameters.lr=[1, 2': VALUE is not YAML"),
    ],
)
def test_a_bad_override_is_the_schemas_error(
    override: str, message: str, capsys: pytest.CaptureFixture
) -> None:
    expected = message.removeprefix("error: ")
    with pytest.raises(errors.InvalidConfigException, match=expected.replace("[", r"\[")):
        _overrides.load_with_overrides(CONST / "const.yaml", [override], announce=False)
    argv = ["experiment", "--config", override, str(CONST / "const.yaml"), str(CONST)]
    assert _cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("det-lightning experiment: error: "), err
    assert message in err and len(err.splitlines()) == 1, err
    assert not compat.is_installed()


# ----- a search's length, compared in batches --------------------------------------------


@pytest.mark.parametrize(
    "length, warned", [(Epoch(1), False), (Batch(64), False), (Epoch(2), True)]
)
def test_a_length_in_epochs_equal_to_the_searchers_batches_is_not_warned(
    length: TrainUnit,
    warned: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``examples/mnist/adaptive.yaml``: ``max_time: 64`` batches, and a script training
    ``Epoch(1)`` of 64 batches (one warning per trial when compared unit by unit)."""
    searcher = {"name": "adaptive_asha", "metric": "loss", "time_metric": "batches", "max_time": 64}
    info = ClusterInfo(TrialInfo(1, 1, {}, {"searcher": searcher}))
    monkeypatch.setenv(TRIAL_INFO_ENV, info.to_environment())
    context = types.SimpleNamespace(engine=EngineState(epoch_len=64))
    spec = {"bracket": {"rung_units": [16, 64]}, "time_metric": "batches"}
    SearcherLengthCheck(spec, length, context).on_training_start()
    assert ("is not the searcher's length" in caplog.text) == warned, caplog.text


@pytest.mark.parametrize(
    "environ",
    [
        {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "2"},  # torchrun
        {"TORCHELASTIC_RUN_ID": "x"},
        {"SLURM_NTASKS": "2", "SLURM_PROCID": "1"},  # srun of two tasks
    ],
)
def test_an_experiment_started_as_one_of_several_processes_is_refused(
    environ: dict,
) -> None:
    """Each of several processes would be a worker taking trials of its own (the hang a
    torchrun-started experiment had): the experiment starts the trials' processes itself."""
    plan = types.SimpleNamespace(trial_class=object(), launch={"devices": 2})
    with pytest.raises(_cli.UsageError) as refused:
        _cli._check_experiment_launch(plan, environ)
    message = str(refused.value)
    assert "once per machine, without torchrun, in a SLURM job of one task" in message
    assert f"{next(iter(environ))}=" in message  # which variable said so
    assert "--devices N or resources.slots_per_trial" in message


def test_a_trial_class_on_several_nodes_is_refused_with_the_script_route() -> None:
    plan = types.SimpleNamespace(trial_class=object(), launch={"devices": 2, "num_nodes": 2})
    with pytest.raises(_cli.UsageError, match="det-lightning run --num-nodes N on every node"):
        _cli._check_experiment_launch(plan, {})
    command = types.SimpleNamespace(trial_class=None, launch={"devices": 2})
    _cli._check_experiment_launch(command, {})  # alone, one node: it goes on
    _cli._check_experiment_launch(command, {"SLURM_NTASKS": "1"})  # one SLURM task
