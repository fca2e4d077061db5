"""Loading and validating Determined experiment configs for running experiments locally.

``load_config`` accepts the YAML a team already submits with ``det experiment create`` (read
with YAML 1.2 scalar rules, as Determined reads it: see ``_yaml``) and
checks it against a small declarative schema written for this package. It keeps Determined's
key names, types and defaults, and sorts keys into three groups:

* keys with a local meaning (``entrypoint``, ``hyperparameters``, ``searcher``,
  ``min_validation_period``, ``checkpoint_storage``, ...) are validated and defaulted;
* keys that only mean something on a Determined cluster (``environment``, ``bind_mounts``,
  ``resources.resource_pool``, ``profiling``, ...) are accepted, type-checked, and reported
  once as ignored (``ExperimentConfig.ignored_keys`` plus a single logged warning);
* anything else is an error (``det_lightning.errors.InvalidConfigException``) that names the
  key's full path, what was expected, and, for a misspelling, the closest valid key.

Differences from Determined, on purpose:

* ``reproducibility.experiment_seed`` defaults to ``None``. Determined's master then picks a
  seed from the clock; here a search draws a random one when it begins and records it in its
  storage (``search._experiment_seed``), and the config is left as given. Either way trials get
  the master's seeds for it (``_master_random``).
* ``searcher.max_length`` is optional (Determined 0.38 deprecated it for most searchers).
* ``checkpoint_storage`` of type ``s3``, ``gcs`` or ``azure`` sends checkpoints to that
  bucket through fsspec (``det_lightning.pytorch._buckets``; the extras ``s3``, ``gcs``,
  ``azure``), each complete once its ``<uuid>/.complete`` marker exists.
* A grid search over no hyperparameters yields one trial (``[{}]``), not zero.

The hyperparameter search helpers :func:`grid_points` and :func:`random_points` follow
Determined's master: grid values are evenly spaced and include both ends (an ``int`` grid is
rounded half away from zero and clamped to the integers available), and a random ``int`` is
drawn from ``[minval, maxval]`` (both ends) as Determined draws it.
"""

from det_lightning._runner.config._experiment_config import (
    ExperimentConfig,
    load_config,
    validate_config,
)
from det_lightning.pytorch._lengths import Length, Lengths
from det_lightning._runner.config._search import (
    CreatedTrial,
    created_trials,
    grid_choices,
    grid_points,
    random_points,
)

__all__ = [
    "CreatedTrial",
    "ExperimentConfig",
    "Length",
    "Lengths",
    "created_trials",
    "grid_choices",
    "grid_points",
    "load_config",
    "random_points",
    "validate_config",
]
