"""The Determined 0.38.1 names det_lightning deliberately does not provide, and why.

Every public name of the ``determined`` modules a trial imports is either provided (the same
path under ``det_lightning``, and under ``determined`` through ``compat.install()``) or listed
here with the reason and what to use instead (``tests/compat/test_public_names_parity.py``
walks Determined's modules and fails on a name in neither). A refused attribute raises
:class:`errors.NotProvidedError` from the module's ``__getattr__`` (:func:`module_getattr`); a
refused submodule fails to import with the same message (``compat``).
"""

from typing import Callable, Dict, Iterable, NoReturn

from det_lightning.errors import NotProvidedError

_CLUSTER = "it belongs to Determined's cluster harness (a master, an agent, a task container)"
_CORE_LOCAL = "det_lightning's Core API runs locally (core.init()), without a master"
_OTHER_FRAMEWORK = (
    "det_lightning runs determined.pytorch, the Core API and determined.transformers code"
)
_TB_SYNC = (
    "TensorBoard files are not synced to a master: they are written under Trainer("
    "tensorboard_dir=...) (or $DET_LIGHTNING_TENSORBOARD_DIR); write your own through "
    "context.get_tensorboard_writer()"
)
_LAUNCHER = (
    "launch several processes with `det-lightning run --devices N train.py`, torchrun, or "
    "pytorch.init(strategy=...) (Lightning's strategies: ddp, fsdp, deepspeed)"
)


def _same(reason: str, names: Iterable[str]) -> Dict[str, str]:
    return {name: reason for name in names}


REFUSED: Dict[str, str] = {
    # ----- determined ------------------------------------------------------------------------
    "determined.EnvContext": f"{_CLUSTER}; read settings from context.get_experiment_config()",
    "determined.ExperimentConfig": (
        "the config is a plain dict here: context.get_experiment_config() (det-lightning "
        "experiment checks it against Determined's schema)"
    ),
    "determined.LegacyTrial": "subclass determined.pytorch.PyTorchTrial",
    "determined.TrialController": f"{_CLUSTER}; pytorch.Trainer(trial, context).fit() runs it",
    "determined.RendezvousInfo": (
        f"{_CLUSTER}; ranks and addresses come from torchrun's environment: "
        "context.distributed (core.DistributedContext)"
    ),
    "determined.ResourcesInfo": (
        f"{_CLUSTER}; the devices are Lightning's: pytorch.init(devices=..., accelerator=...)"
    ),
    **_same(
        f"{_CLUSTER}; the local command is det-lightning (run, experiment, checkpoint)",
        [
            "determined.cli",
            "determined.common",
            "determined.deploy",
            "determined.exec",
            "determined.ipc",
            "determined.load",
            "determined.workload",
            "determined.gpu",
            "determined.constants",
        ],
    ),
    **_same(
        f"{_OTHER_FRAMEWORK}; for Lightning code use Lightning directly",
        [
            "determined.keras",
            "determined.layers",
            "determined.horovod",
            "determined.lightning",
        ],
    ),
    # ----- determined.pytorch ----------------------------------------------------------------
    "determined.pytorch.deepspeed": (
        "DeepSpeedTrial is not supported; train a PyTorchTrial with "
        "pytorch.init(strategy='deepspeed') (Lightning's DeepSpeed strategy)"
    ),
    # ----- determined.util -------------------------------------------------------------------
    **_same(
        f"{_CLUSTER}; Determined's harness uses it internally",
        [
            "determined.util.check_sshd",
            "determined.util.write_user_code",
            "determined.util.make_metrics",
            "determined.util.validate_batch_metrics",
            "determined.util.make_timing_log",
            "determined.util.mask_checkpoint_storage",
            "determined.util.mask_config_dict",
            "determined.util.signal_process_tree",
            "determined.util.json_encode",
        ],
    ),
    **_same(
        "legacy `--trial model_def:Trial` entrypoints are handled by det-lightning experiment "
        "(entrypoint: model_def:Trial)",
        [
            "determined.util.legacy_trial_entrypoint_to_script",
            "determined.util.match_legacy_trial_class",
        ],
    ),
    # ----- determined.core -------------------------------------------------------------------
    # core.init() and its contexts work in local mode (det_lightning/core/_context.py).
    "determined.core.SearcherContextMissing": (
        "core.init() always has a searcher here (one operation of length 1, as Determined's "
        "local mode): use core_context.searcher"
    ),
    # ----- determined.launch -----------------------------------------------------------------
    **_same(
        f"{_OTHER_FRAMEWORK}; {_LAUNCHER}",
        ["determined.launch.horovod", "determined.launch.tensorflow"],
    ),
    "determined.launch.deepspeed": _LAUNCHER,
    **_same(
        "wrap_rank's own helpers: run it as `python3 -m determined.launch.wrap_rank RANK -- "
        "COMMAND`, or call its main()",
        [
            "determined.launch.wrap_rank.lineend",
            "determined.launch.wrap_rank.read_newlines_or_carriage_returns",
            "determined.launch.wrap_rank.forward_stream",
            "determined.launch.wrap_rank.run_all",
        ],
    ),
    **_same(
        f"{_CLUSTER} (the commands a cluster node runs); {_LAUNCHER}",
        [
            "determined.launch.torch_distributed.C10D_PORT",
            "determined.launch.torch_distributed.create_launch_cmd",
            "determined.launch.torch_distributed.create_log_redirect_cmd",
            "determined.launch.torch_distributed.create_pid_server_cmd",
            "determined.launch.torch_distributed.create_pid_client_cmd",
        ],
    ),
    # ----- determined.tensorboard ------------------------------------------------------------
    **_same(
        _TB_SYNC,
        [
            f"determined.tensorboard.{name}"
            for name in (
                "TensorboardManager",
                "S3TensorboardManager",
                "SharedFSTensorboardManager",
                "AzureTensorboardManager",
                "build",
                "get_base_path",
                "get_sync_path",
                "get_experiment_sync_path",
                "get_metric_writer",
                "MetricWriter",
                "BatchMetricWriter",
                "azure",
                "base",
                "directory",
                "fetchers",
                "gcs",
                "s3",
                "shared",
                "util",
            )
        ]
        + [
            f"determined.tensorboard.metric_writers.{name}"
            for name in (
                "MetricWriter",
                "BatchMetricWriter",
                "callback",
            )
        ],
    ),
    "determined.tensorboard.metric_writers.tensorflow": _OTHER_FRAMEWORK,
    # ----- determined.experimental -----------------------------------------------------------
    **_same(
        "the model registry needs Determined's master; keep models as checkpoints "
        "(client.get_checkpoint(uuid).download())",
        [
            "determined.experimental.ModelOrderBy",
            "determined.experimental.ModelSortBy",
            "determined.experimental.model",
        ],
    ),
    **_same(
        "use the names determined.experimental.client exports (Checkpoint, CheckpointState, "
        "DownloadMode, TrialMetrics, ...)",
        ["determined.experimental.checkpoint", "determined.experimental.metrics"],
    ),
    "determined.experimental.core_v2": (
        f"{_CORE_LOCAL}: core.init() is the local Core API; unmanaged trials report to a master"
    ),
    "determined.experimental.test_one_batch": (
        "`det-lightning check CONFIG MODEL_DIR` trains one batch, validates and checkpoints "
        "each trial of a project"
    ),
    **_same(
        "users, workspaces, models and OAuth clients need Determined's master; experiments, "
        "trials and checkpoints are read locally (client.get_experiment, get_trial, "
        "get_checkpoint)",
        [
            f"determined.experimental.client.{name}"
            for name in (
                "add_oauth_client",
                "create_model",
                "create_user",
                "create_workspace",
                "delete_workspace",
                "get_model",
                "get_model_by_id",
                "get_model_labels",
                "get_models",
                "get_session_username",
                "get_user_by_id",
                "get_user_by_name",
                "get_workspace",
                "list_models",
                "list_oauth_clients",
                "list_users",
                "list_workspaces",
                "remove_oauth_client",
                "whoami",
            )
        ],
    ),
    "determined.experimental.client.stream_trials_training_metrics": (
        "a search keeps each trial's validations (iter_trials_metrics(ids, 'validation')); "
        "training metrics are in the trials' TensorBoard files"
    ),
    "determined.experimental.client.C": "a type variable of Determined's own decorators",
}


def reason(determined_name: str) -> "str | None":
    """Why ``determined_name`` (a ``determined.*`` dotted name) is not provided, or None."""
    return REFUSED.get(determined_name)


def refusal(determined_name: str) -> NotProvidedError:
    """The error for a refused name, naming the reason and what to use."""
    why = REFUSED[determined_name]
    return NotProvidedError(
        f"{determined_name} is not provided by det_lightning: {why}.", name=determined_name
    )


def module_getattr(module_name: str) -> Callable[[str], NoReturn]:
    """A PEP 562 ``__getattr__`` for ``det_lightning.X`` raising the refusal of ``determined.X.name``.

    Names not refused (dunders that the import system probes, typos) raise ``AttributeError``
    as usual.
    """
    alias = "determined" + module_name[len("det_lightning") :]

    def __getattr__(name: str) -> NoReturn:
        full = f"{alias}.{name}"
        if full in REFUSED:
            raise refusal(full)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["REFUSED", "module_getattr", "reason", "refusal"]
