"""A trial's hyperparameters for TensorBoard's HParams view, in the trial's own run directory.

The experiment's chief writes them once per trial, before it trains, into
``<tensorboard dir>/trial-<n>/`` (beside the trial's scalars, so each trial is one session of
the view) as an events file of its own (``*.hparams``: a rerun or a resumed trial finds it and
writes nothing). The view's metric is the searcher metric under the tag the trial logs its
validations as (``Determined/validation_loss``; ``adapters/schedule.py`` ``_log_validation``).
"""

import json
import pathlib
import time
from typing import Any, Dict, Union

SUFFIX = ".hparams"

Scalar = Union[bool, int, float, str]


def metric_tag(metric: str) -> str:
    """The TensorBoard tag of a validation metric.

    >>> metric_tag("validation_loss"), metric_tag("accuracy")
    ('Determined/validation_loss', 'Determined/val_accuracy')
    """
    return "Determined/" + (metric if metric.startswith("val") else "val_" + metric)


def flat_hparams(hparams: Dict[str, Any], prefix: str = "") -> Dict[str, Scalar]:
    """Nested groups joined with ".", and values TensorBoard takes (bool, number, string): any
    other value (a list, None) as its JSON text.

    >>> flat_hparams({"lr": 0.1, "opt": {"name": "sgd", "nesterov": True}, "sizes": [1, 2],
    ...               "act": None})
    {'lr': 0.1, 'opt.name': 'sgd', 'opt.nesterov': True, 'sizes': '[1, 2]', 'act': 'null'}
    """
    flat: Dict[str, Scalar] = {}
    for key, value in hparams.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_hparams(value, name + "."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = json.dumps(value, default=str)
    return flat


def write_hparams(
    run_dir: pathlib.Path, hparams: Dict[str, Any], metric: str, trial_name: str
) -> bool:
    """Writes the trial's hyperparameters and the view's metric into ``run_dir``, unless an
    earlier run of the trial did. Returns whether it wrote them."""
    if run_dir.is_dir() and any(run_dir.glob(f"*{SUFFIX}")):
        return False
    from tensorboard.plugins.hparams import summary_v2
    from torch.utils.tensorboard.writer import FileWriter

    values = flat_hparams(hparams)
    config = summary_v2.hparams_config_pb(
        hparams=[summary_v2.HParam(name) for name in values],
        metrics=[summary_v2.Metric(metric_tag(metric))],
    )
    session = summary_v2.hparams_pb(values, trial_id=trial_name, start_time_secs=int(time.time()))
    run_dir.mkdir(parents=True, exist_ok=True)
    writer = FileWriter(str(run_dir), filename_suffix=SUFFIX)
    try:
        writer.add_summary(config)
        writer.add_summary(session)
    finally:
        writer.close()
    return True
