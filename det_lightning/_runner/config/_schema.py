"""The experiment-config schema: Determined's keys, types and defaults.

Keys with a local meaning are validated and defaulted; cluster-only keys are accepted,
type-checked and reported as ignored; anything else is an unknown-key error.
"""

from typing import Any, Dict

from det_lightning._runner.config._checks import (
    _ENTRYPOINT_HINT,
    _LOCAL_SEARCHERS,
    _UNITS,
    _check_entrypoint,
    _check_hparams,
    _check_searcher,
    _check_searcher_name,
    _check_shared_fs,
    _check_string_list,
    _length_check,
)
from det_lightning._runner.config._master_random import MAX_EXPERIMENT_SEED
from det_lightning._runner.config._nodes import _fail, _join, _Section, _Tagged, _Value


def _ignored(*kinds: str) -> _Value:
    """A key accepted for compatibility but with no local meaning."""
    return _Value(kinds, ignored=True)


def _length(default: Any, minimum: int, allow_int: bool = False) -> _Value:
    """A training-length key."""
    return _Value(
        ("any",) if allow_int else ("mapping",),
        default=default,
        custom=_length_check(minimum, allow_int, nullable=default is None),
        hint=f"Use exactly one of {', '.join(_UNITS)}, e.g. {{batches: 1000}}.",
    )


_SEARCHER = _Section(
    {
        "name": _Value(
            ("string",),
            custom=_check_searcher_name,
            hint=f"Use one of {', '.join(_LOCAL_SEARCHERS)}.",
        ),
        "metric": _Value(("string",), hint="Name the validation metric to optimize."),
        "smaller_is_better": _Value(("boolean",), default=True),
        "max_length": _length(None, minimum=1, allow_int=True),
        "max_trials": _Value(("integer",), minimum=1),
        "max_concurrent_trials": _Value(("integer",), minimum=0),
        "source_trial_id": _Value(("integer",), default=None),
        "source_checkpoint_uuid": _Value(("string",), default=None),
        # adaptive_asha settings (the searcher itself is refused when an experiment runs).
        "mode": _Value(("string",), choices=("aggressive", "standard", "conservative")),
        "divisor": _Value(("number",)),
        "max_rungs": _Value(("integer",), minimum=1),
        "bracket_rungs": _Value(("list",)),
        "time_metric": _Value(("string",)),
        "max_time": _Value(("integer",), minimum=1),
        "stop_once": _Value(("boolean",)),
    },
    required=("name", "metric"),
    check=_check_searcher,
    hint="e.g. searcher: {name: single, metric: validation_loss, max_length: {batches: 1000}}",
)

_SAVE_COUNTS = {
    "save_experiment_best": _Value(("integer",), minimum=0, default=0),
    "save_trial_best": _Value(("integer",), minimum=0, default=1),
    "save_trial_latest": _Value(("integer",), minimum=0, default=1),
}

# Object stores, with Determined's keys; checkpoints go there through fsspec (docs/howto/object-store.md).
_S3_STORAGE = _Section(
    {
        "type": _Value(("string",)),
        "bucket": _Value(("string",)),
        "prefix": _Value(("string",), default=None),
        "endpoint_url": _Value(("string",), default=None),
        "access_key": _Value(("string",), default=None),
        "secret_key": _Value(("string",), default=None),
        **_SAVE_COUNTS,
    },
    required=("type", "bucket"),
)
_GCS_STORAGE = _Section(
    {
        "type": _Value(("string",)),
        "bucket": _Value(("string",)),
        "prefix": _Value(("string",), default=None),
        **_SAVE_COUNTS,
    },
    required=("type", "bucket"),
)
_AZURE_STORAGE = _Section(
    {
        "type": _Value(("string",)),
        "container": _Value(("string",)),
        "prefix": _Value(("string",), default=None),
        "connection_string": _Value(("string",), default=None),
        "account_url": _Value(("string",), default=None),
        "credential": _Value(("string",), default=None),
        **_SAVE_COUNTS,
    },
    required=("type", "container"),
)

_CHECKPOINT_STORAGE = _Tagged(
    tag="type",
    variants={
        "shared_fs": _Section(
            {
                "type": _Value(("string",)),
                "host_path": _Value(("string",)),
                "storage_path": _Value(("string",), default=None),
                "propagation": _ignored("string"),
                "container_path": _ignored("string"),
                "checkpoint_path": _ignored("string"),
                "tensorboard_path": _ignored("string"),
                **_SAVE_COUNTS,
            },
            required=("type", "host_path"),
            check=_check_shared_fs,
        ),
        "directory": _Section(
            {"type": _Value(("string",)), "container_path": _Value(("string",)), **_SAVE_COUNTS},
            required=("type", "container_path"),
        ),
        "s3": _S3_STORAGE,
        "gcs": _GCS_STORAGE,
        "azure": _AZURE_STORAGE,
    },
    # Determined's master merges a block without ``type`` with the cluster's default storage
    # (CheckpointStorageConfigV0.Merge); here the default storage is the checkpoint directory.
    untagged=_Section(
        dict(_SAVE_COUNTS),
        hint="(A block of only save_experiment_best, save_trial_best and save_trial_latest "
        "keeps checkpoints in the checkpoint directory.)",
    ),
)

_RESOURCES = _Section(
    {
        "slots_per_trial": _Value(("integer",), minimum=0, default=1),
        **{
            key: _ignored("any")
            for key in (
                "resource_pool",
                "priority",
                "max_slots",
                "weight",
                "shm_size",
                "agent_label",
                "devices",
                "native_parallel",
                "is_single_node",
                "slots",
            )
        },
    },
)

# Lightning's precision settings a trial can train in (``lightning.Trainer(precision=...)``).
PRECISIONS = ("64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")

_OPTIMIZATIONS = _Section(
    {
        "aggregation_frequency": _Value(("integer",), minimum=1, default=1),
        "average_aggregated_gradients": _Value(("boolean",), default=True),
        "average_training_metrics": _Value(("boolean",), default=False),
        "gradient_compression": _ignored("boolean"),
        "mixed_precision": _Value(("string",), choices=("O0", "O1", "O2", "O3"), ignored=True),
        # Ours: Lightning's precision for every trial (what --precision sets; it wins).
        "precision": _Value(("string",), choices=PRECISIONS, default=None),
        "tensor_fusion_threshold": _ignored("integer"),
        "tensor_fusion_cycle_time": _ignored("integer"),
        "auto_tune_tensor_fusion": _ignored("boolean"),
    },
)

_EXPERIMENT = _Section(
    {
        "name": _Value(("string",), default=None),
        "description": _Value(("string",), default=None),
        "labels": _Value(("list",), default=[], custom=_check_string_list),
        "entrypoint": _Value(("any",), custom=_check_entrypoint, hint=_ENTRYPOINT_HINT),
        "hyperparameters": _Value(("mapping",), default={}, custom=_check_hparams),
        "searcher": _SEARCHER,
        "records_per_epoch": _Value(("integer",), minimum=0, default=0),
        "min_validation_period": _length({"batches": 0}, minimum=0),
        "min_checkpoint_period": _length({"batches": 0}, minimum=0),
        "checkpoint_storage": _CHECKPOINT_STORAGE,
        "checkpoint_policy": _Value(("string",), choices=("best", "all", "none"), default="best"),
        "resources": _RESOURCES,
        "optimizations": _OPTIMIZATIONS,
        "reproducibility": _Section(
            {
                "experiment_seed": _Value(  # as Determined, whose master reads a uint32
                    ("integer",),
                    minimum=0,
                    maximum=MAX_EXPERIMENT_SEED,
                    default=None,
                    hint="Determined's master reads the seed as a 32-bit unsigned integer.",
                ),
                # Ours: init(deterministic=True) for every trial (what --deterministic sets).
                "deterministic": _Value(("boolean",), default=False),
            }
        ),
        "data": _Value(("mapping",), default={}),
        "perform_initial_validation": _Value(("boolean",), default=False),
        "scheduling_unit": _Value(("integer",), minimum=1, default=100),
        "debug": _Value(("boolean",), default=False),
        # Cluster-only keys: accepted so existing configs load, reported as ignored.
        "max_restarts": _Value(("integer",), minimum=0),
        "environment": _ignored("mapping"),
        "bind_mounts": _ignored("list"),
        "profiling": _ignored("mapping"),
        "workspace": _ignored("string"),
        "project": _ignored("string"),
        "pbs": _ignored("mapping"),
        "slurm": _ignored("mapping"),
        "data_layer": _ignored("mapping"),
        "security": _ignored("mapping"),
        "tensorboard_storage": _ignored("mapping"),
        "internal": _ignored("any"),
        "log_policies": _ignored("any"),
        "retention_policy": _ignored("mapping"),
        "integrations": _ignored("mapping"),
        "preemption_timeout": _ignored("integer"),
    },
    required=("entrypoint", "searcher"),
)


def _check_grid_counts(hparams: Dict[str, Any], path: str) -> None:
    """Under grid search every int/double/log hyperparameter needs a ``count``."""
    for key, value in hparams.items():
        item_path = _join(path, key)
        if not isinstance(value, dict):
            continue
        if "type" not in value:
            _check_grid_counts(value, item_path)
        elif value["type"] in ("int", "double", "log") and value.get("count") is None:
            raise _fail(
                item_path,
                f"grid search needs 'count' for this {value['type']!r} "
                "hyperparameter (how many values to try from minval to maxval).",
                "Add e.g. count: 3, or make it a 'const' or 'categorical'.",
            )
