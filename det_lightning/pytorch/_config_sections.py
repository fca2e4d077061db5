"""The sections of ``exp_conf`` the API layer reads, typed: built once per run from an
experiment config and passed on, their defaults here (Determined 0.38.1's, but the seed)::

    reproducibility.experiment_seed         None (init() seeds nothing locally; Determined picks
                                            a time-based one)
    reproducibility.deterministic           False (ours: see ``init(deterministic)``)
    checkpoint_storage.save_experiment_best 0
    checkpoint_storage.save_trial_best      1
    checkpoint_storage.save_trial_latest    1
    searcher.metric                         "validation_loss" (what ``Trainer`` ranks by)
    searcher.smaller_is_better              True
    debug                                   False

Both layers build them with ``from_exp_conf``: ``init()`` from a user's plain dict (partial, or
None), the runner from its validated config (whose ``searcher`` it types in full:
``_runner/config/_searcher.py``). Nothing else reads these sections by key
(``tests/unit/test_config_sections.py`` checks that).
"""

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple

from det_lightning import errors
from det_lightning._info import get_cluster_info
from det_lightning.pytorch._seeds import MAX_EXPERIMENT_SEED

SAVE_COUNTS = ("save_trial_best", "save_trial_latest", "save_experiment_best")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReproducibilityConfig:
    """The ``reproducibility`` section.

    >>> ReproducibilityConfig.from_exp_conf({"reproducibility": {"experiment_seed": 7}})
    ReproducibilityConfig(experiment_seed=7, deterministic=False)
    >>> ReproducibilityConfig.from_exp_conf(None) == ReproducibilityConfig()
    True
    """

    experiment_seed: Optional[int] = None
    deterministic: bool = False

    @classmethod
    def from_exp_conf(cls, exp_conf: Optional[Mapping[str, Any]]) -> "ReproducibilityConfig":
        """The section of ``exp_conf``; a key left out takes its default (a null seed too).

        Raises:
            ValueError: the section is not a mapping, the seed not an int >= 0, or
                ``deterministic`` not a boolean.
        """
        section = _section(exp_conf, "reproducibility", ValueError)
        seed = section.get("experiment_seed")
        if seed is not None and (
            not isinstance(seed, int)
            or isinstance(seed, bool)
            or not 0 <= seed <= MAX_EXPERIMENT_SEED
        ):
            raise ValueError(
                f"exp_conf['reproducibility']['experiment_seed'] = {seed!r}: expected an int "
                f">= 0 and <= {MAX_EXPERIMENT_SEED} (Determined reads it as a 32-bit unsigned "
                "integer)."
            )
        deterministic = section.get("deterministic", cls.deterministic)
        if not isinstance(deterministic, bool):
            raise ValueError(
                f"exp_conf['reproducibility']['deterministic'] = {deterministic!r}: expected "
                "true or false."
            )
        return cls(experiment_seed=seed, deterministic=deterministic)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointStorageConfig:
    """The ``checkpoint_storage`` section: where checkpoints go and how many stay.

    Attributes:
        type: ``shared_fs``, ``directory``, ``s3``, ``gcs`` or ``azure``; None: the default
            storage (the checkpoint directory), as when only ``save_*`` counts are given.
        retention_configured: the section sets a ``save_*`` count (then every checkpoint
            policy deletes what retention does not keep, not only ``best``).

    >>> s = CheckpointStorageConfig.from_exp_conf({"checkpoint_storage": {"save_trial_best": 3}})
    >>> s.type, s.save_trial_best, s.save_trial_latest, s.save_experiment_best
    (None, 3, 1, 0)
    >>> s.retention_configured, CheckpointStorageConfig.from_exp_conf(None).retention_configured
    (True, False)
    """

    type: Optional[str] = None
    host_path: Optional[str] = None  # shared_fs
    storage_path: Optional[str] = None  # shared_fs
    container_path: Optional[str] = None  # directory
    bucket: Optional[str] = None  # s3, gcs
    container: Optional[str] = None  # azure
    prefix: Optional[str] = None  # s3, gcs, azure
    endpoint_url: Optional[str] = None  # s3
    access_key: Optional[str] = None  # s3
    secret_key: Optional[str] = None  # s3
    connection_string: Optional[str] = None  # azure
    account_url: Optional[str] = None  # azure
    credential: Optional[str] = None  # azure
    save_experiment_best: int = 0
    save_trial_best: int = 1
    save_trial_latest: int = 1
    retention_configured: bool = False

    @classmethod
    def from_exp_conf(cls, exp_conf: Optional[Mapping[str, Any]]) -> "CheckpointStorageConfig":
        """The section of ``exp_conf``; a key left out takes its default (a null string too;
        keys of no local meaning, such as ``propagation``, are not kept).

        Raises:
            InvalidExperimentException: the section is not a mapping, a ``save_*`` count is
                not an integer >= 0, or a path, name or key is not a string.
        """
        section = _section(exp_conf, "checkpoint_storage", errors.InvalidExperimentException)
        given: Dict[str, Any] = {}
        for key in SAVE_COUNTS:
            value = section.get(key, getattr(cls, key))
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise errors.InvalidExperimentException(
                    f"checkpoint_storage.{key} is {value!r}; it must be an integer >= 0 (the "
                    "number of checkpoints to keep)."
                )
            given[key] = value
        for field in dataclasses.fields(cls):
            value = section.get(field.name)
            if field.type != Optional[str] or value is None:
                continue
            if not isinstance(value, str):
                raise errors.InvalidExperimentException(
                    f"checkpoint_storage.{field.name} is {value!r}; it must be a string."
                )
            given[field.name] = value
        return cls(retention_configured=any(k in section for k in SAVE_COUNTS), **given)

    def describe_retention(self) -> str:
        """The three counts, as a log line names them."""
        return ", ".join(f"{key}={getattr(self, key)}" for key in SAVE_COUNTS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearcherMetricConfig:
    """What ``Trainer`` reads of the ``searcher`` section: the metric a ``best`` checkpoint
    policy ranks by, and which way it improves.

    Attributes:
        metric_configured: the section names ``metric`` (else a missing metric is no error:
            ``_checkpoint_policy``).

    >>> SearcherMetricConfig.from_exp_conf({"searcher": {"metric": "acc"}})
    SearcherMetricConfig(metric='acc', metric_configured=True, smaller_is_better=True)
    >>> SearcherMetricConfig.from_exp_conf(None).metric
    'validation_loss'
    """

    metric: str = "validation_loss"
    metric_configured: bool = False
    smaller_is_better: bool = True

    @classmethod
    def from_exp_conf(cls, exp_conf: Optional[Mapping[str, Any]]) -> "SearcherMetricConfig":
        """The section of ``exp_conf``, its values as given (a key left out takes its
        default); the runner validated them, ``init()``'s dict is the user's."""
        section = (exp_conf or {}).get("searcher") or {}
        return cls(
            metric=section.get("metric", cls.metric),
            metric_configured="metric" in section,
            smaller_is_better=bool(section.get("smaller_is_better", cls.smaller_is_better)),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DebugConfig:
    """The top-level ``debug`` flag (the context's ``_debug_enabled``).

    >>> DebugConfig.from_exp_conf({"debug": True}), DebugConfig.from_exp_conf(None)
    (DebugConfig(debug=True), DebugConfig(debug=False))
    """

    debug: bool = False

    @classmethod
    def from_exp_conf(cls, exp_conf: Optional[Mapping[str, Any]]) -> "DebugConfig":
        """The flag of ``exp_conf``, False when it is None or leaves the key out."""
        return cls(debug=bool((exp_conf or {}).get("debug", cls.debug)))


def _section(exp_conf: Optional[Mapping[str, Any]], key: str, error: type) -> Mapping[str, Any]:
    """``exp_conf[key]``, ``{}`` when either is None or the key is absent."""
    section = (exp_conf or {}).get(key) or {}
    if not isinstance(section, Mapping):
        raise error(
            f"exp_conf[{key!r}] is {section!r}; it must be a mapping of the section's keys "
            f"(e.g. {_EXAMPLES[key]})."
        )
    return section


_EXAMPLES = {
    "reproducibility": "{'experiment_seed': 7}",
    "checkpoint_storage": "{'save_trial_best': 1}",
}


def trial_settings(
    hparams: Optional[Dict[str, Any]], exp_conf: Optional[Dict[str, Any]]
) -> Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]], Optional[int]]:
    """The hyperparameters, config and seed a trial runs with: as given, seeded with
    ``reproducibility.experiment_seed`` (None: not seeded, as Determined's local mode).

    In one trial of a ``det-lightning experiment`` search (``det.get_cluster_info()`` set), as
    Determined's ``init()`` on a cluster: the trial's config whatever ``exp_conf`` says, its
    hyperparameters where none are given, and the seed the search drew for the trial, which
    seeds a script's trial (``entrypoint: python3 train.py``) as it does a model_def trial.

    Raises:
        ValueError: the seed is not an int from 0 to 4294967295.
    """
    info = get_cluster_info()
    if info is not None and info.task_type == "TRIAL":
        if hparams is None:
            hparams = info.trial.hparams
        exp_conf = info.trial.config
        if info.trial.trial_seed is not None:
            ReproducibilityConfig.from_exp_conf(exp_conf)  # the config's checks, all the same
            return hparams, exp_conf, info.trial.trial_seed
    return hparams, exp_conf, ReproducibilityConfig.from_exp_conf(exp_conf).experiment_seed


__all__ = [
    "CheckpointStorageConfig",
    "DebugConfig",
    "ReproducibilityConfig",
    "SAVE_COUNTS",
    "SearcherMetricConfig",
    "trial_settings",
]
