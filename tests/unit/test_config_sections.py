"""The sections of ``exp_conf`` typed once (``pytorch/_config_sections.py``, and the runner's
``searcher``, ``resources`` and ``optimizations`` in ``_runner/config/``): their defaults, each
refusal, a partial dict and None, and no reader of the raw sections outside the config
modules."""

import ast
import dataclasses
import pathlib
from typing import Any, Dict, List

import pytest

from det_lightning import errors
from det_lightning._runner.config import load_config
from det_lightning._runner.config._sections import OptimizationsConfig, ResourcesConfig
from det_lightning.pytorch._config_sections import (
    CheckpointStorageConfig,
    DebugConfig,
    ReproducibilityConfig,
    SearcherMetricConfig,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Where the raw sections may be read: the typed sections (the lengths and periods too) and the
# runner's schema and loader.
CONFIG_MODULES = (
    ROOT / "det_lightning" / "pytorch" / "_config_sections.py",
    ROOT / "det_lightning" / "_runner" / "config",
    ROOT / "det_lightning" / "pytorch" / "_lengths.py",
)
SECTIONS = (
    "reproducibility",
    "checkpoint_storage",
    "searcher",
    "resources",
    "optimizations",
    "debug",
)


# ----- ReproducibilityConfig ------------------------------------------------------------------
@pytest.mark.parametrize("exp_conf", [None, {}, {"reproducibility": None}, {"name": "x"}])
def test_reproducibility_defaults(exp_conf: Any) -> None:
    section = ReproducibilityConfig.from_exp_conf(exp_conf)
    assert section == ReproducibilityConfig()
    assert (section.experiment_seed, section.deterministic) == (None, False)


def test_reproducibility_keeps_what_was_given_and_defaults_the_rest() -> None:
    seeded = ReproducibilityConfig.from_exp_conf({"reproducibility": {"experiment_seed": 0}})
    assert seeded == ReproducibilityConfig(experiment_seed=0, deterministic=False)
    both = {"reproducibility": {"experiment_seed": 7, "deterministic": True}}
    assert ReproducibilityConfig.from_exp_conf(both) == ReproducibilityConfig(
        experiment_seed=7, deterministic=True
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        seeded.experiment_seed = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        ReproducibilityConfig(7, True)  # type: ignore[misc]  # keyword-only


@pytest.mark.parametrize(
    "section,message",
    [
        ({"experiment_seed": -1}, r"\['experiment_seed'\] = -1: expected an int >= 0"),
        ({"experiment_seed": "abc"}, r"\['experiment_seed'\] = 'abc': expected an int >= 0"),
        ({"experiment_seed": True}, r"\['experiment_seed'\] = True: expected an int >= 0"),
        ({"deterministic": "yes"}, r"\['deterministic'\] = 'yes': expected true or false"),
        ({"deterministic": None}, r"\['deterministic'\] = None: expected true or false"),
    ],
)
def test_reproducibility_refusals_name_the_key(section: Dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReproducibilityConfig.from_exp_conf({"reproducibility": section})


def test_a_section_that_is_no_mapping_is_refused() -> None:
    with pytest.raises(ValueError, match=r"exp_conf\['reproducibility'\] is 7; it must be a map"):
        ReproducibilityConfig.from_exp_conf({"reproducibility": 7})
    with pytest.raises(errors.InvalidExperimentException, match="'checkpoint_storage'.*mapping"):
        CheckpointStorageConfig.from_exp_conf({"checkpoint_storage": "s3://b"})


# ----- CheckpointStorageConfig ----------------------------------------------------------------
@pytest.mark.parametrize("exp_conf", [None, {}, {"checkpoint_storage": None}])
def test_storage_defaults_are_determineds(exp_conf: Any) -> None:
    storage = CheckpointStorageConfig.from_exp_conf(exp_conf)
    assert storage == CheckpointStorageConfig()
    counts = (storage.save_experiment_best, storage.save_trial_best, storage.save_trial_latest)
    assert counts == (0, 1, 1)  # Determined 0.38.1's
    assert (storage.type, storage.retention_configured) == (None, False)


def test_a_partial_storage_section_keeps_what_was_given() -> None:
    storage = CheckpointStorageConfig.from_exp_conf(
        {
            "checkpoint_storage": {
                "type": "s3",
                "bucket": "b",
                "prefix": None,  # null: the default
                "endpoint_url": "http://e:1",
                "save_trial_latest": 3,
                "propagation": "rprivate",  # no local meaning: not kept
            }
        }
    )
    assert storage == CheckpointStorageConfig(
        type="s3",
        bucket="b",
        endpoint_url="http://e:1",
        save_trial_latest=3,
        retention_configured=True,
    )
    assert storage.describe_retention() == (
        "save_trial_best=1, save_trial_latest=3, save_experiment_best=0"
    )
    typed_only = CheckpointStorageConfig.from_exp_conf({"checkpoint_storage": {"type": "gcs"}})
    assert not typed_only.retention_configured  # no save_* count: only 'best' deletes
    with pytest.raises(TypeError):
        CheckpointStorageConfig("s3")  # type: ignore[misc]  # keyword-only


@pytest.mark.parametrize(
    "section,message",
    [
        ({"save_trial_best": -1}, "save_trial_best is -1; it must be an integer >= 0"),
        ({"save_trial_latest": 1.5}, "save_trial_latest is 1.5; it must be an integer >= 0"),
        ({"save_experiment_best": True}, "save_experiment_best is True; it must be an integer"),
        ({"save_trial_best": None}, "save_trial_best is None; it must be an integer >= 0"),
        ({"type": "s3", "bucket": 5}, "checkpoint_storage.bucket is 5; it must be a string"),
        ({"type": 3}, "checkpoint_storage.type is 3; it must be a string"),
    ],
)
def test_storage_refusals_name_the_key(section: Dict[str, Any], message: str) -> None:
    with pytest.raises(errors.InvalidExperimentException, match=message):
        CheckpointStorageConfig.from_exp_conf({"checkpoint_storage": section})


def test_a_checkpoint_loads_whatever_its_stored_storage_section_says() -> None:
    """Loading a checkpoint rebuilds the trial's context from the stored experiment config;
    like Determined's, that never reads ``checkpoint_storage``: a section training refuses
    (a negative count, a number for a bucket) does not keep a checkpoint from loading."""
    from det_lightning import pytorch

    stored = {"checkpoint_storage": {"type": "s3", "bucket": 5, "save_trial_best": -1}}
    context = pytorch.CheckpointLoadContext(hparams={}, exp_conf=stored)
    assert context.get_experiment_config() == stored
    with pytest.raises(errors.InvalidExperimentException, match="save_trial_best"):
        CheckpointStorageConfig.from_exp_conf(stored)  # what training would say


def test_the_runner_builds_each_section_once() -> None:
    config = load_config(
        {
            "entrypoint": "model_def:Trial",
            "searcher": {"name": "single", "metric": "loss"},
            "reproducibility": {"experiment_seed": 3},
            "checkpoint_storage": {"type": "shared_fs", "host_path": "/h", "save_trial_best": 2},
        }
    )
    assert config.reproducibility_config == ReproducibilityConfig(experiment_seed=3)
    assert config.reproducibility_config is config.reproducibility_config
    storage = config.checkpoint_storage_config
    assert storage == CheckpointStorageConfig(
        type="shared_fs", host_path="/h", save_trial_best=2, retention_configured=True
    )
    assert config.checkpoint_storage_config is storage
    assert config.checkpoint_dir() == "/h/"


# ----- the searcher's metric, debug, resources and optimizations ------------------------------
def test_the_trainer_reads_the_searcher_metric_with_its_defaults() -> None:
    assert SearcherMetricConfig.from_exp_conf(None) == SearcherMetricConfig()
    assert SearcherMetricConfig.from_exp_conf({"searcher": None}) == SearcherMetricConfig(
        metric="validation_loss", metric_configured=False, smaller_is_better=True
    )
    given = {"searcher": {"metric": "acc", "smaller_is_better": False, "name": "single"}}
    assert SearcherMetricConfig.from_exp_conf(given) == SearcherMetricConfig(
        metric="acc", metric_configured=True, smaller_is_better=False
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        SearcherMetricConfig().metric = "x"  # type: ignore[misc]


def test_the_trainer_passes_the_searcher_metric_on() -> None:
    from det_lightning import pytorch
    from tests.fixtures.trials import make_trials

    conf = {"searcher": {"metric": "accuracy", "smaller_is_better": False}}
    with pytorch.init(hparams={"lr": 0.1}, exp_conf=conf) as context:
        options = pytorch.Trainer(make_trials(pytorch)["MLPTrial"](context), context)._options
    assert (options.searcher_metric, options.searcher_metric_configured) == ("accuracy", True)
    assert options.smaller_is_better is False


@pytest.mark.parametrize("exp_conf,debug", [(None, False), ({}, False), ({"debug": True}, True)])
def test_debug_defaults_to_false(exp_conf: Any, debug: bool) -> None:
    assert DebugConfig.from_exp_conf(exp_conf).debug is debug


def test_the_runner_types_resources_and_optimizations_once() -> None:
    default = load_config({"entrypoint": "m:T", "searcher": {"name": "single", "metric": "l"}})
    assert default.resources_config == ResourcesConfig(slots_per_trial=1)
    assert default.optimizations_config == OptimizationsConfig(
        aggregation_frequency=1, precision=None
    )
    config = load_config(
        {
            "entrypoint": "m:T",
            "searcher": {"name": "single", "metric": "l"},
            "resources": {"slots_per_trial": 0},
            "optimizations": {"aggregation_frequency": 3, "precision": "bf16-mixed"},
        }
    )
    assert config.resources_config is config.resources_config  # built once
    assert config.resources_config.slots_per_trial == 0
    assert config.optimizations_config == OptimizationsConfig(
        aggregation_frequency=3, precision="bf16-mixed"
    )
    with pytest.raises(TypeError):
        OptimizationsConfig(3)  # type: ignore[misc]  # keyword-only


# ----- nobody else reads the raw sections -----------------------------------------------------
def _names_section(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in SECTIONS


def _is_section(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in SECTIONS


def _is_raw_read(node: ast.AST) -> bool:
    """``y["checkpoint_storage"]``, ``y.get("checkpoint_storage")``, ``x.checkpoint_storage[...]``
    or ``x.checkpoint_storage.get(...)`` (or the same for any of ``SECTIONS``)."""
    if isinstance(node, ast.Subscript):
        return _names_section(node.slice) or _is_section(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        return node.func.attr == "get" and (
            _is_section(node.func.value) or (first is not None and _names_section(first))
        )
    return False


def _raw_section_reads(path: pathlib.Path, root: pathlib.Path = ROOT) -> List[str]:
    """Where ``path`` reads a key of a raw section, as ``file:line``."""
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(root)}:{n.lineno}" for n in ast.walk(tree) if _is_raw_read(n)]


def _outside_the_config_modules() -> List[pathlib.Path]:
    paths = [*(ROOT / "det_lightning").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]
    return [p for p in paths if not any(p == m or m in p.parents for m in CONFIG_MODULES)]


def test_nobody_reads_the_raw_sections_outside_the_config_modules() -> None:
    paths = _outside_the_config_modules()
    assert len(paths) > 100
    found = [line for path in paths for line in _raw_section_reads(path)]
    assert found == [], f"read these through the typed sections: {found}"


def test_the_check_sees_raw_reads(tmp_path: pathlib.Path) -> None:
    experiment_config = CONFIG_MODULES[1] / "_experiment_config.py"
    assert _raw_section_reads(experiment_config)  # the property as given
    source = tmp_path / "reads.py"
    source.write_text(
        "a = conf['reproducibility']['deterministic']\n"
        "b = (conf or {}).get('checkpoint_storage') or {}\n"
        "c = config.checkpoint_storage['type']\n"
        "d = config.reproducibility.get('experiment_seed')\n"
        "e = storage.save_trial_best\n"  # typed: fine
        "f = checkpoint_storage.get('type')\n"  # core.init's own argument: fine
        "g = (context.engine.exp_conf or {}).get('searcher') or {}\n"
        "h = bool((self._exp_conf or {}).get('debug', False))\n"
        "i = self.raw['optimizations']['precision']\n"
        "j = record['config']['resources']\n"
        "k = settings.searcher == 'single'\n"  # the search's typed settings: fine
        "logger.debug('x')\n"  # fine
    )
    found = sorted(_raw_section_reads(source, tmp_path))
    assert found == sorted(f"reads.py:{n}" for n in (1, 2, 3, 4, 7, 8, 9, 10))
