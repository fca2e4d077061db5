"""``DetCallback``: a Hugging Face ``transformers.Trainer`` loop reporting to the Core API.

Determined 0.38.1's ``determined.transformers.DetCallback``, on det_lightning's Core API: the
same arguments and attributes, the same metrics reported under the same names and steps, the
same checkpoints (``output_dir/checkpoint-<step>/`` and ``runs/``, uploaded by every rank with
``shard=True``, metadata ``steps_completed`` and ``trial_id``), and the same resume: in a
``det-lightning experiment`` trial the trial's newest checkpoint is downloaded into
``output_dir`` and set as ``args.resume_from_checkpoint``.

Where it differs from Determined's (``docs/howto/transformers.md``):

- outside ``det-lightning experiment`` (``python train.py``) it works, reporting to the local
  Core API, where Determined's raised "must be run on a Determined cluster";
- a searcher with ``max_time``/``time_metric`` (``adaptive_asha``) is checked against the
  ``Trainer``'s length, where Determined 0.38.1's raised ``AttributeError``
  (``self.required_metrics`` was never set);
- the ``logs`` dict the ``Trainer`` passes on to other callbacks is left as it was (Determined's
  removed ``epoch`` from it and added ``batches`` and ``epochs``), and a ``filter_metrics`` list
  given is not appended to.
"""

import json
import logging
import os
import pathlib
import weakref
from typing import Any, Dict, List, Optional, Tuple

import transformers
from transformers import trainer_utils

from det_lightning._info import get_cluster_info
from det_lightning.pytorch._config_sections import SearcherMetricConfig
from det_lightning.pytorch._lengths import Lengths

logger = logging.getLogger("det_lightning.transformers")

EVAL = "eval_"
TEST = "test_"
TRAIN = "train_"
# Metrics Determined leaves out: the Trainer's timings.
SPEED_SUFFIXES = ("_runtime", "_per_second", "_compilation_time")


class DetCallback(transformers.TrainerCallback):  # type: ignore[misc]  # transformers: untyped
    """Reports a ``transformers.Trainer``'s metrics to the Core API, uploads its checkpoints,
    stops it when the search (or a SIGTERM) asks, and resumes it from the trial's newest
    checkpoint.

    Include it in the ``callbacks`` passed to the ``Trainer``, and pass
    ``args.resume_from_checkpoint`` to ``trainer.train()``.

    Args:
        core_context: the result of ``det.core.init()``.
        args: the ``TrainingArguments`` the ``Trainer`` gets.
        filter_metrics: the metric names to report (a name matches a metric that contains
            it); default: all. The searcher's metric and time metric are always reported.
        user_data: a dict written as ``my_data.json`` into every checkpoint.
    """

    def __init__(
        self,
        core_context: Any,
        args: transformers.TrainingArguments,
        filter_metrics: Optional[List[str]] = None,
        user_data: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.core_context = core_context
        self.filter_metrics = list(filter_metrics) if filter_metrics else filter_metrics
        self.user_data = user_data

        self.last_train_metrics = -1
        self.last_eval_metrics = -1
        self.last_save = -1
        self.last_progress = 0

        self.info = get_cluster_info()
        if self.info is None:
            logger.info(
                "DetCallback outside a det-lightning experiment: metrics and checkpoints go "
                "to core_context's storage, and nothing is resumed (run the script with "
                "`det-lightning experiment config.yaml .` to resume its trial)."
            )
        self.required_metrics: List[str] = []
        self._claim: Optional[weakref.finalize] = None
        if getattr(core_context.distributed, "rank", 0) == 0:
            fd = _claim_output_dir(str(args.output_dir), self.info)
            self._claim = weakref.finalize(self, os.close, fd)
        self.load_last_checkpoint(args)

        self.searcher_metric: Optional[str] = None
        self.time_metric: Optional[str] = None
        if self.info is not None and self.info.task_type == "TRIAL":
            config = self.info.trial.config
            self._check_searcher_config(config, args)
            self.searcher_metric = SearcherMetricConfig.from_exp_conf(config).metric
            time = Lengths.from_config(config).searcher_time
            self.time_metric = time.unit if time is not None else None
            # The searcher's metric and time metric are never filtered out.
            if self.filter_metrics:
                self.filter_metrics.append(self.searcher_metric)
                if self.time_metric:
                    self.filter_metrics.append(self.time_metric)

        # Determined's undocumented switches for the save and evaluation at the end.
        self._force_final_save = True
        self._force_final_evaluate = True

    def load_last_checkpoint(self, args: transformers.TrainingArguments) -> None:
        """In a trial that resumes: downloads its newest checkpoint into ``args.output_dir``
        and sets ``args.resume_from_checkpoint`` to the ``checkpoint-<step>`` folder in it."""
        latest = self.info.latest_checkpoint if self.info is not None else None
        if latest is None:
            return
        if getattr(args, "overwrite_output_dir", False) is True:
            logger.info(
                "Skipping downloading last checkpoint from Determined due to "
                "overwrite_output_dir=True."
            )
            return
        # Every rank needs every file (DeepSpeed's shards): no selector.
        self.core_context.checkpoint.download(latest, args.output_dir)
        # The folder this checkpoint holds, never another run's left in output_dir with more
        # steps (Determined's get_last_checkpoint took the highest in the folder: a fresh
        # container's there).
        steps = self.core_context.checkpoint.get_metadata(latest).get("steps_completed")
        checkpoint_path = os.path.join(str(args.output_dir), f"checkpoint-{steps}")
        if not os.path.isdir(checkpoint_path):
            checkpoint_path = trainer_utils.get_last_checkpoint(args.output_dir)
        args.resume_from_checkpoint = checkpoint_path
        logger.info(f"Latest checkpoint downloaded to {checkpoint_path}.")

    def _check_searcher_config(
        self, config: Dict[str, Any], args: transformers.TrainingArguments
    ) -> None:
        """The searcher's length must be the ``Trainer``'s (``--max_steps`` in batches, else
        ``--num_train_epochs`` in epochs): Determined's checks."""
        args_len: float
        if args.max_steps > -1:
            args_unit, args_len, len_arg = "batches", args.max_steps, "--max_steps"
        else:
            args_unit, args_len, len_arg = "epochs", args.num_train_epochs, "--num_train_epochs"
        lengths = Lengths.from_config(config)
        if lengths.max_length is not None and lengths.max_length.unit is None:
            raise ValueError(
                "HF trainer no longer respects the deprecated searcher.max_length field.  "
                "searcher.max_length is deprecated; please remove it and rely on "
                f"{len_arg} instead to avoid ambiguous training specifications."
            )
        if lengths.max_length is not None:
            search_unit, search_len = lengths.max_length.unit, lengths.max_length.number
            if (search_unit, search_len) != (args_unit, args_len):
                raise ValueError(
                    "HF trainer units does not match configured searcher.max_length "
                    f"({args_unit}={args_len} != {search_unit}={search_len}).  The "
                    "searcher.max_length field is deprecated; please remove it and avoid "
                    "ambiguous training specifications."
                )
        elif lengths.searcher_time is not None:
            search_unit, search_len = lengths.searcher_time.unit, lengths.searcher_time.number
            if search_unit not in ("batches", "epochs"):
                self.required_metrics.append(str(search_unit))
            elif (search_unit, search_len) != (args_unit, args_len):
                raise ValueError(
                    "HF trainer units does not match the max_time configured for the "
                    f"searcher ({args_unit}={args_len} != {search_unit}={search_len}).  "
                    "Please update one of the searcher.max_time config field or the "
                    f"{len_arg} to match the other."
                )

    def _check_eval_metrics(self, metrics: Dict[str, Any]) -> None:
        search_ok = self.searcher_metric is None or self.searcher_metric in metrics
        time_ok = self.time_metric is None or self.time_metric in metrics
        if not search_ok and not time_ok:
            raise ValueError(
                f"Searcher metric '{self.searcher_metric}' set by searcher.metric config field "
                f"and time metric '{self.time_metric}' from searcher.time_metric config field "
                "are both missing; you must emit those metrics for the hyperparameter search "
                "to work."
            )
        if not search_ok:
            raise ValueError(
                f"Searcher metric '{self.searcher_metric}' set by searcher.metric config field "
                "is missing; you must emit that metric for features like hyperparameter "
                "search, checkpoint garbage collection, and selecting the best checkpoint to "
                "work."
            )
        if not time_ok:
            raise ValueError(
                f"Time metric '{self.time_metric}' set by searcher.time_metric config field is "
                "missing; you must emit that metric for the hyperparameter search to work."
            )

    def on_log(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        logs: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        if logs is None:
            logger.warning("on_log called with empty logs")
            return
        metrics, metric_type = self._get_metrics(logs)
        metrics["batches"] = metrics.get("batches", state.global_step)
        metrics["epochs"] = metrics.get("epochs", state.epoch)
        if metric_type == TRAIN:
            # The average training metrics at the end come with the last step's: one report.
            if self.last_train_metrics != state.global_step:
                self.last_train_metrics = state.global_step
                if state.is_world_process_zero:
                    self.core_context.train.report_metrics(
                        group="training", steps_completed=state.global_step, metrics=metrics
                    )
        elif metric_type == EVAL:
            # The evaluation after training, at the step of the last one: one report.
            if self.last_eval_metrics != state.global_step:
                self.last_eval_metrics = state.global_step
                if state.is_world_process_zero:
                    self._check_eval_metrics(metrics)
                    self.core_context.train.report_metrics(
                        group="validation", steps_completed=state.global_step, metrics=metrics
                    )
        else:
            logger.warning(f"Metrics not reported: metric type = {metric_type}.")

        # Stopped by the search or a SIGTERM: stop; the save at the end checkpoints.
        if self.core_context.preempt.should_preempt():
            control.should_training_stop = True

    def _get_metrics(self, logs: Dict[str, Any]) -> Tuple[Dict[str, Any], str]:
        metric_type = get_metric_type(logs)
        if not self.filter_metrics:
            metrics = dict(logs)
        else:
            wanted = self.filter_metrics
            metrics = {k: v for k, v in logs.items() if any(m in k for m in wanted)}
        metrics.pop("epoch", None)  # the Trainer's rounded epoch
        for name in [m for m in metrics if m.endswith(SPEED_SUFFIXES)]:
            metrics.pop(name)
        return metrics, metric_type

    def on_save(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        self.last_save = state.global_step
        # Where the Trainer saved this step's model, optimizer and state.
        local_path = os.path.join(str(args.output_dir), f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and self.user_data is not None:
            self._on_save_user_data(local_path)

        metadata: Dict[str, Any] = {"steps_completed": state.global_step}
        if self.info is not None and self.info.task_type == "TRIAL":
            metadata["trial_id"] = self.info.trial.trial_id

        def selector(x: str) -> bool:
            return x.startswith((f"checkpoint-{state.global_step}/", "runs/"))

        self.core_context.checkpoint.upload(
            args.output_dir, metadata=metadata, shard=True, selector=selector
        )

    def _on_save_user_data(self, save_path: str) -> None:
        """Writes ``user_data`` as ``my_data.json`` into the checkpoint."""
        with open(os.path.join(save_path, "my_data.json"), "w") as f:
            json.dump(self.user_data, f)

    def on_train_end(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        if self._claim is not None:  # output_dir is free for the next run
            self._claim()

    def on_step_end(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        if state.is_world_process_zero and args.max_steps > -1:
            # At most 100 progress reports: each 1% more.
            progress = state.global_step / args.max_steps
            percent = int(progress * 100)
            if percent > self.last_progress:
                self.last_progress = percent
                self.core_context.train.report_progress(progress)

    def on_epoch_end(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        if control.should_training_stop:
            is_end = True
        elif args.max_steps > -1:
            is_end = state.global_step >= args.max_steps
        else:
            is_end = state.epoch >= args.num_train_epochs

        # The last chance to evaluate and save: neither twice for one step, and no
        # evaluation when stopped early; the save is never skipped then.
        if is_end:
            preempted = self.core_context.preempt.should_preempt()
            if state.global_step > self.last_eval_metrics:
                if self._force_final_evaluate and not preempted:
                    control.should_evaluate = True
            if state.global_step > self.last_save:
                if self._force_final_save or preempted:
                    control.should_save = True

        if state.is_world_process_zero and args.max_steps == -1:
            self.core_context.train.report_progress(state.epoch / args.num_train_epochs)


LOCK_FILE = ".det_lightning-output.lock"


def _claim_output_dir(output_dir: str, info: Any) -> int:
    """Locks ``output_dir`` for this run (the chief's, until training ends or the process
    does) and returns the lock's descriptor: two runs saving into one folder would upload each
    other's files. On Determined each trial had a fresh container; here a search's trials
    share the project folder, so a relative ``output_dir`` is shared. Warns about
    ``checkpoint-*`` folders an earlier run left there.

    Raises:
        RuntimeError: another live process holds the folder, named, with the fix.
    """
    import fcntl

    folder = pathlib.Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RuntimeError(
            f"output_dir {folder.resolve()} is in use by {holder}: two runs saving into one "
            "folder would upload each other's checkpoint files. Give each run its own "
            'output_dir, e.g. output_dir=f"hf-out/trial-{info.trial.trial_id}" in a '
            "det-lightning experiment (info = det.get_cluster_info())."
        ) from None
    trial = f"trial {info.trial.trial_id}, " if info is not None else ""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{trial}process {os.getpid()}".encode(), 0)
    left = sorted(p.name for p in folder.glob("checkpoint-*") if p.is_dir())
    if left and (info is None or info.latest_checkpoint is None):
        logger.warning(
            f"output_dir {folder} holds {', '.join(left)} from an earlier run. A folder this "
            "run saves again at the same step keeps the earlier files it does not rewrite, "
            "and they are uploaded with its checkpoint: remove them, or give this run its own "
            "output_dir."
        )
    return fd


def get_metric_type(d: Dict[str, Any]) -> str:
    """``eval_``, ``test_`` or ``train_``: what a ``Trainer`` log holds."""
    if any(k.startswith(EVAL) for k in d):
        return EVAL
    if any(k.startswith(TEST) for k in d):
        return TEST
    return TRAIN


def get_ds_config_path_from_args(args: List[str]) -> Optional[str]:
    """The path after ``--deepspeed`` in ``args``, or None."""
    for idx in range(len(args)):
        if args[idx] == "--deepspeed":
            return args[idx + 1]
    return None


__all__ = ["DetCallback", "get_ds_config_path_from_args", "get_metric_type"]
