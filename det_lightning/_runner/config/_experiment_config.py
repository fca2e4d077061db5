"""``ExperimentConfig`` and the functions that load and validate an experiment config."""

import functools
import logging
import os
import pathlib
from typing import Any, Dict, List, Optional, Tuple, Union

import yaml

from det_lightning._runner.config._checks import _LEGACY_ENTRYPOINT
from det_lightning._runner.config._nodes import _Context, _fail, _type_error, _validate_section
from det_lightning._runner.config._schema import _EXPERIMENT, _check_grid_counts
from det_lightning._runner.config._search import grid_points, random_points
from det_lightning._runner.config._searcher import SearcherConfig
from det_lightning._runner.config._sections import OptimizationsConfig, ResourcesConfig
from det_lightning._runner.config._yaml import load_yaml12
from det_lightning.errors import InvalidConfigException
from det_lightning.pytorch._config_sections import CheckpointStorageConfig, ReproducibilityConfig
from det_lightning.pytorch._lengths import Length, Lengths

logger = logging.getLogger("det_lightning")


class ExperimentConfig:
    """A validated experiment config with Determined's defaults filled in.

    Attributes:
        raw: the validated config (a plain dict) including defaults; the whole of it goes where
            Determined passes ``exp_conf``, its keys are read through the properties here.
        lengths: the training lengths and periods (``searcher.max_length``,
            ``min_validation_period``, ...), parsed once.
        ignored_keys: dotted paths of the keys that were accepted but have no local meaning.
    """

    def __init__(self, raw: Dict[str, Any], ignored_keys: List[str]) -> None:
        """Wrap an already-validated config; use :func:`load_config` to build one.

        Args:
            raw: the validated config.
            ignored_keys: paths of keys accepted but ignored locally.
        """
        self.raw = raw
        self.ignored_keys = list(ignored_keys)
        self.lengths = Lengths.from_config(raw)
        self.name_given = raw.get("name") is not None  # load_config names an unnamed one

    @property
    def as_given(self) -> Dict[str, Any]:
        """The config with its name as the file gave it (None for an unnamed experiment,
        whose random name changes every time it is loaded): what identifies the experiment
        (``_search_settings.experiment_id``)."""
        return self.raw if self.name_given else {**self.raw, "name": None}

    def __repr__(self) -> str:
        """Short form naming the entrypoint and searcher."""
        searcher = self.searcher_config.name
        return f"ExperimentConfig(entrypoint={self.entrypoint!r}, searcher={searcher!r})"

    @property
    def entrypoint(self) -> Union[str, List[str]]:
        """The ``entrypoint``: ``model_def:TrialClass`` or a command (string or argv list)."""
        value: Union[str, List[str]] = self.raw["entrypoint"]
        return value

    @property
    def hyperparameters(self) -> Dict[str, Any]:
        """The ``hyperparameters`` section: search spaces and constants, not sampled values."""
        value: Dict[str, Any] = self.raw["hyperparameters"]
        return value

    @property
    def searcher(self) -> Dict[str, Any]:
        """The ``searcher`` section as given (the runner reads ``searcher_config``)."""
        value: Dict[str, Any] = self.raw["searcher"]
        return value

    @functools.cached_property
    def searcher_config(self) -> SearcherConfig:
        """The ``searcher`` section, typed, with its defaults."""
        return SearcherConfig.from_section(self.raw["searcher"])

    @property
    def name(self) -> str:
        """The experiment's ``name`` (``load_config`` gives an unnamed one Determined's kind)."""
        return str(self.raw.get("name") or "")

    @property
    def checkpoint_policy(self) -> str:
        """``checkpoint_policy``: ``best`` (default), ``all`` or ``none``."""
        return str(self.raw["checkpoint_policy"])

    @property
    def perform_initial_validation(self) -> bool:
        """``perform_initial_validation``: validate before the first batch."""
        return bool(self.raw["perform_initial_validation"])

    @property
    def max_restarts(self) -> int:
        """``max_restarts``: how often a failing trial is restarted from its latest
        checkpoint (Determined's default: 5)."""
        value = self.raw.get("max_restarts")
        return 5 if value is None else int(value)

    @property
    def checkpoint_storage(self) -> Optional[Dict[str, Any]]:
        """The ``checkpoint_storage`` section as given, None when unset (the runner reads
        ``checkpoint_storage_config``)."""
        storage: Optional[Dict[str, Any]] = self.raw.get("checkpoint_storage") or None
        return storage

    @functools.cached_property
    def checkpoint_storage_config(self) -> CheckpointStorageConfig:
        """The ``checkpoint_storage`` section, typed, with its defaults."""
        return CheckpointStorageConfig.from_exp_conf(self.raw)

    @functools.cached_property
    def reproducibility_config(self) -> ReproducibilityConfig:
        """The ``reproducibility`` section, typed: ``deterministic`` (ours; see
        ``init(deterministic)``) and ``experiment_seed``, None meaning "do not seed" (see the
        module notes)."""
        return ReproducibilityConfig.from_exp_conf(self.raw)

    def legacy_trial_class(self) -> Optional[str]:
        """The ``module:Class`` entrypoint, or None when the entrypoint is a command.

        Returns:
            The entrypoint string when it names a trial class the way Determined detects it.
        """
        entrypoint = self.entrypoint
        if isinstance(entrypoint, str) and _LEGACY_ENTRYPOINT.match(entrypoint.strip()):
            return entrypoint.strip()
        return None

    def max_length(self) -> Optional[Tuple[int, Optional[str]]]:
        """``searcher.max_length`` as ``(value, unit)``.

        Returns:
            ``(n, "batches"|"epochs"|"records")``; ``(n, None)`` for the unit-less integer form
            (the training code decides the unit, as in Determined); None when absent.
        """
        length = self.lengths.max_length
        return None if length is None else (length.number, length.unit)

    def min_validation_period(self) -> Optional[Tuple[int, str]]:
        """``min_validation_period`` as ``(value, unit)``, None when unset or 0."""
        return _as_pair(self.lengths.validation_period)

    def min_checkpoint_period(self) -> Optional[Tuple[int, str]]:
        """``min_checkpoint_period`` as ``(value, unit)``, None when unset or 0."""
        return _as_pair(self.lengths.checkpoint_period)

    def checkpoint_dir(self) -> Optional[str]:
        """Where checkpoints go according to ``checkpoint_storage``.

        Returns:
            ``host_path`` joined with ``storage_path`` for ``shared_fs``, ``container_path``
            for ``directory``, ``s3://bucket/prefix`` (``gs://``, ``az://container/prefix``)
            for ``s3`` (``gcs``, ``azure``), or None when unset or without ``type`` (only
            ``save_*`` counts: the default storage, the checkpoint directory, as Determined's
            master merges it with the cluster's).
        """
        storage = self.checkpoint_storage_config
        if storage.type == "shared_fs":
            return os.path.join(storage.host_path or "", storage.storage_path or "")
        if storage.type == "directory":
            return storage.container_path
        from det_lightning.pytorch._remote import storage_url

        return storage_url(storage)

    @functools.cached_property
    def resources_config(self) -> ResourcesConfig:
        """The ``resources`` section, typed, with its defaults."""
        return ResourcesConfig.from_section(self.raw["resources"])

    @functools.cached_property
    def optimizations_config(self) -> OptimizationsConfig:
        """The ``optimizations`` section, typed, with its defaults."""
        return OptimizationsConfig.from_section(self.raw["optimizations"])

    def records_per_epoch(self) -> Optional[int]:
        """``records_per_epoch``, or None when unset (0)."""
        return self.lengths.records_per_epoch

    def trial_hparams(self) -> List[Dict[str, Any]]:
        """The hyperparameter values of each trial the searcher would create.

        ``single`` samples once, ``random`` samples ``max_trials`` times (seeded by
        ``experiment_seed``), ``grid`` enumerates the grid.

        Returns:
            One dict of hyperparameter values per trial.

        Raises:
            InvalidConfigException: the searcher is ``adaptive_asha``, which is not run locally.
        """
        name = self.searcher["name"]
        if name == "grid":
            return grid_points(self.hyperparameters)
        if name == "random":
            return random_points(
                self.hyperparameters,
                self.searcher["max_trials"],
                self.reproducibility_config.experiment_seed,
            )
        if name == "single":
            return random_points(
                self.hyperparameters, 1, self.reproducibility_config.experiment_seed
            )
        raise _fail(
            "searcher.name",
            f"the {name!r} searcher is not run locally.",
            "Use single, grid or random.",
        )


def _as_pair(period: Length) -> Optional[Tuple[int, str]]:
    """A period as ``(n, unit)``, None for 0 (never)."""
    return (period.number, str(period.unit)) if period.number > 0 else None


def _read_yaml(path: Union[str, "os.PathLike[str]"]) -> Any:
    """Parse a YAML file into Python values."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        message = f"cannot read experiment config {str(path)!r}: {exc}"
        raise InvalidConfigException(message) from exc
    try:
        return load_yaml12(text)  # YAML 1.2 numbers, as Determined reads configs
    except yaml.YAMLError as exc:
        raise InvalidConfigException(f"{str(path)!r} is not valid YAML: {exc}") from exc


# Determined's master names an unnamed experiment "Experiment (<three words>)"; these lists are
# ours (any words do: the name only has to tell experiments apart).
_NAME_WORDS = (
    (
        "amber",
        "brisk",
        "calm",
        "deft",
        "eager",
        "fond",
        "gentle",
        "hardy",
        "keen",
        "lucid",
        "mellow",
        "nimble",
        "proud",
        "quiet",
        "rapid",
        "steady",
        "tidy",
        "vivid",
        "wise",
        "zesty",
    ),
    (
        "alpine",
        "coastal",
        "dusky",
        "golden",
        "hidden",
        "lunar",
        "misty",
        "northern",
        "polar",
        "rustic",
        "silver",
        "sunny",
        "velvet",
        "wild",
        "winter",
        "woven",
    ),
    (
        "badger",
        "crane",
        "dolphin",
        "falcon",
        "gecko",
        "heron",
        "ibis",
        "jaguar",
        "koala",
        "lemur",
        "marten",
        "newt",
        "otter",
        "puffin",
        "quail",
        "raven",
        "salmon",
        "tapir",
        "wren",
    ),
)


def default_experiment_name() -> str:
    """The name Determined gives an experiment whose config has none (``description`` is
    kept as it is, apart from the name).

    >>> import re
    >>> bool(re.fullmatch(r"Experiment \\([a-z]+-[a-z]+-[a-z]+\\)", default_experiment_name()))
    True
    """
    import random

    words = [random.SystemRandom().choice(choices) for choices in _NAME_WORDS]
    return f"Experiment ({'-'.join(words)})"


def validate_config(config: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """Validate a config dict without logging.

    Args:
        config: the parsed experiment config.

    Returns:
        The config with defaults filled, and the paths of the ignored keys.

    Raises:
        InvalidConfigException: an unknown key, a wrong type, or a missing required key.
    """
    if not isinstance(config, dict):
        raise _type_error("", ("mapping",), config, "An experiment config is a YAML mapping.")
    ctx = _Context()
    raw = _validate_section(_EXPERIMENT, config, "", ctx)
    if raw["searcher"]["name"] == "grid":
        _check_grid_counts(raw["hyperparameters"], "hyperparameters")
    return raw, ctx.ignored


def load_config(
    source: Union[str, "os.PathLike[str]", Dict[str, Any]], announce: bool = True
) -> ExperimentConfig:
    """Load and validate a Determined experiment config.

    Keys with no local meaning are reported in ``ignored_keys`` and in one logged warning.

    Args:
        source: a path to a YAML file, or an already-parsed config dict (not modified).
        announce: log the warning now; else the caller does, with ``announce_ignored`` (the
            command logs it from one process of the job).

    Returns:
        The validated config.

    Raises:
        InvalidConfigException: the file cannot be read or parsed, or the config is invalid.
    """
    if isinstance(source, (str, os.PathLike)):
        config = _read_yaml(source)
    else:
        config = source
    raw, ignored = validate_config(config)
    named = raw.get("name") is not None
    if not named:
        raw["name"] = default_experiment_name()
    if announce:
        announce_ignored(ignored)
    loaded = ExperimentConfig(raw, ignored)
    loaded.name_given = named
    return loaded


def announce_ignored(ignored: List[str]) -> None:
    """Logs the one warning that names the config keys ignored locally (none: nothing)."""
    if ignored:
        logger.warning(
            "These experiment-config keys only matter on a Determined cluster and are "
            "ignored when running locally: %s",
            ", ".join(ignored),
        )
