"""Planning a local experiment: every check that can fail before the first trial trains.

``plan_experiment(config, MODEL_DIR)`` settles what ``experiment.py`` then runs: the model
directory, where checkpoints and TensorBoard files go, the trials known up front, the entrypoint
(a ``module:Trial`` class or a command), Lightning's launch options, and a search's settings::

    directory = _absolute(model_dir)         # must exist, else UsageError
    search = _search_settings(config)        # single: a search of one trial
    trials = _planned_trials(config, search) # a grid's points; none for draws
    trial_class, command = _entrypoint_plan(config)
    if trial_class:                          # each configured point's training length must
        config.lengths.fit_lengths(hparams)  #   resolve (random: a sample of what it may draw;
                                             #   adaptive_asha: only the periods, the searcher
                                             #   sets the length)
    checkpoint_root = (checkpoint_dir or checkpoint_storage or $DET_LIGHTNING_CHECKPOINT_DIR
                       or ./checkpoints) / <experiment id>  # a directory, or a URL
    tensorboard_root = ($DET_LIGHTNING_TENSORBOARD_DIR or ./tensorboard) / <experiment id>
    experiment id = <name>-<search key>      # _search_settings.experiment_id
"""

import dataclasses
import os
import pathlib
from typing import Any, Dict, List, Optional, Tuple, Union

from det_lightning._env import CHECKPOINT_DIR_ENV, TENSORBOARD_DIR_ENV
from det_lightning._runner._search_settings import SearchSettings, experiment_id
from det_lightning._runner.config import ExperimentConfig, random_points
from det_lightning._runner.harness import parse_command, runs_once_per_node
from det_lightning.pytorch._remote import checkpoint_location
from det_lightning.pytorch._store import CheckpointStore


class UsageError(ValueError):
    """The command line or the model directory cannot be used (not a config-key error)."""


@dataclasses.dataclass
class Plan:
    """Everything a run needs, settled before the first trial starts.

    Attributes:
        config: the validated experiment config.
        model_dir: the model definition directory (absolute).
        checkpoint_root: the experiment's folder, ``<checkpoint dir>/<experiment id>``: trial
            ``n`` checkpoints to ``checkpoint_root / f"trial-{n}"`` (a namespace of the store: a
            directory, or a URL; ``_store.CheckpointStore``).
        tensorboard_root: likewise for TensorBoard files, ``<tensorboard dir>/<experiment id>``.
        trials: the hyperparameter values of each trial.
        trial_class: ``module:Class`` for a legacy entrypoint, else None.
        command: the ``det-lightning run`` arguments for a command entrypoint, else None.
        launch: Lightning launch options for ``init()`` (or ``run``'s flags).
        once_per_node: the command has no Determined launcher, so it runs once per node as on
            Determined, and its first ``init()`` starts a process per slot (``_relaunch``).
    """

    config: ExperimentConfig
    model_dir: pathlib.Path
    checkpoint_root: CheckpointStore
    tensorboard_root: pathlib.Path
    trials: List[Dict[str, Any]]
    trial_class: Optional[str]
    command: Optional[List[str]]
    launch: Dict[str, Any]
    search: SearchSettings  # every searcher's (single: a search of one trial)
    experiment_id: str  # _search_settings.experiment_id: the same for every rerun
    storage: Optional[str] = None  # a search's Optuna storage (None: a journal file)
    heartbeat_timeout: float = 120.0  # seconds a trial's lease lasts without renewal (_lease)
    once_per_node: bool = False


# ----- planning ------------------------------------------------------------------------------


def launch_options(config: ExperimentConfig, given: Dict[str, Any]) -> Dict[str, Any]:
    """Launch options: the command line's, else the config's: ``resources.slots_per_trial`` as
    ``devices``, ``optimizations.precision`` and ``reproducibility.deterministic`` (ours).

    >>> from det_lightning._runner.config import load_config
    >>> conf = {"entrypoint": "m:T", "searcher": {"name": "single", "metric": "loss"}}
    >>> launch_options(load_config({**conf, "resources": {"slots_per_trial": 2}}), {})
    {'devices': 2}
    >>> launch_options(load_config({**conf, "resources": {"slots_per_trial": 0}}), {})
    {'accelerator': 'cpu'}
    >>> launch_options(load_config({**conf, "optimizations": {"precision": "bf16-mixed"},
    ...                             "reproducibility": {"deterministic": True}}), {})
    {'precision': 'bf16-mixed', 'deterministic': True}
    """
    options = {name: value for name, value in given.items() if value is not None}
    slots = config.resources_config.slots_per_trial
    if slots > 1:
        options.setdefault("devices", slots)
    if slots == 0:  # Determined's CPU-only trial
        options.setdefault("accelerator", "cpu")
    precision = config.optimizations_config.precision
    if precision is not None:
        options.setdefault("precision", precision)
    if config.reproducibility_config.deterministic:
        options.setdefault("deterministic", True)
    return options


def _search_settings(config: ExperimentConfig) -> SearchSettings:
    """The search's settings (``single``: a search of one trial)."""
    name = config.searcher_config.name
    if name in ("grid", "random", "single"):
        return SearchSettings.from_upfront(config.searcher_config, config.hyperparameters)

    size = config.hyperparameters.get("global_batch_size")
    if isinstance(size, dict):
        size = size.get("val")
    return SearchSettings.from_searcher(
        config.searcher_config, config.lengths, size if isinstance(size, int) else None
    )


def _entrypoint_plan(config: ExperimentConfig) -> Tuple[Optional[str], Optional[List[str]]]:
    """``(trial_class, command)``: exactly one of them is set. (A search's command trial gets
    its hyperparameters through ``det.get_cluster_info()``, as on a cluster.)"""
    trial_class = config.legacy_trial_class()
    if trial_class is not None:
        return trial_class, None
    parsed = parse_command(config.entrypoint)
    if isinstance(parsed, str):
        return parsed, None
    return None, parsed


def _planned_trials(config: ExperimentConfig, search: SearchSettings) -> List[Dict[str, Any]]:
    """The hyperparameters of each trial known before training: a grid's points in the order
    their trials run; none for searches that draw them as they go (single and random)."""
    if search.grid:
        return config.trial_hparams()[::-1]  # Determined creates the last point's trial first
    return []


def _absolute(path: Union[str, "os.PathLike[str]"]) -> pathlib.Path:
    return pathlib.Path(os.path.abspath(os.path.expanduser(str(path))))


def plan_experiment(
    config: ExperimentConfig,
    model_dir: Union[str, "os.PathLike[str]"],
    launch: Optional[Dict[str, Any]] = None,
    checkpoint_dir: Optional[str] = None,
) -> Plan:
    """Checks everything that can be checked before training, and settles the directories.

    Checkpoints go to ``checkpoint_dir``, else ``checkpoint_storage`` (``host_path`` /
    ``storage_path``, or an s3/gcs/azure bucket and prefix), else
    ``$DET_LIGHTNING_CHECKPOINT_DIR``, else ``./checkpoints``; any of them may be a URL.

    Raises:
        errors.InvalidConfigException: the config cannot run locally (the message names the key).
        UsageError: ``model_dir`` is not a directory.
    """
    directory = _absolute(model_dir)
    if not directory.is_dir():
        raise UsageError(f"MODEL_DIR {str(model_dir)!r} is not a directory (the model definition).")
    search = _search_settings(config)
    trials = _planned_trials(config, search)
    trial_class, command = _entrypoint_plan(config)
    if trial_class is not None and search is not None and search.searcher == "adaptive_asha":
        # The searcher sets the length; the periods must resolve for what it may draw.
        for hparams in random_points(
            config.hyperparameters, 4, config.reproducibility_config.experiment_seed
        ):
            config.lengths.fit_periods(hparams)
    elif trial_class is not None:
        for hparams in config.trial_hparams():  # random: a sample of what it may draw
            config.lengths.fit_lengths(hparams)
    root = checkpoint_dir or config.checkpoint_dir() or os.environ.get(CHECKPOINT_DIR_ENV)
    tensorboard = os.environ.get(TENSORBOARD_DIR_ENV) or "tensorboard"
    identity = experiment_id(config.as_given)
    return Plan(
        config=config,
        model_dir=directory,
        checkpoint_root=checkpoint_location(root or "checkpoints", config.checkpoint_storage_config)
        / identity,
        tensorboard_root=_absolute(tensorboard) / identity,
        trials=trials,
        trial_class=trial_class,
        command=command,
        launch=launch_options(config, launch or {}),
        search=search,
        experiment_id=identity,
        once_per_node=command is not None and runs_once_per_node(config.entrypoint),
    )
