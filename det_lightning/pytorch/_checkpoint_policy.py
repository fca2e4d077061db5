"""``checkpoint_policy``: whether a validation's metrics call for a checkpoint.

``CheckpointPolicy`` is the frozen setting (built once by ``adapters/fit.py``); ``after_validation``
is the decision, pure, so every combination is tested on a table (``tests/unit/test_checkpoint_policy.py``).
``adapters/checkpoints.py`` writes what it decides. As in Determined (``_pytorch_trial.py``,
``ckpt_policy``)::

    "all":  checkpoint after every validation
    "none": never after a validation (periods, the end and preemption still checkpoint)
    "best": checkpoint when the searcher metric beats the trial's best so far (a tie does not);
            a missing metric is an error, unless exp_conf never named one and the default is
            not reported: then "all" from now on, with one warning (Determined's local mode)
"""

import dataclasses
from typing import Any, Mapping, Optional

import numpy as np

POLICIES = ("best", "all", "none")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointPolicy:
    """What decides whether a validation is followed by a checkpoint.

    Args:
        policy: ``"best"``, ``"all"`` or ``"none"`` (``fit(checkpoint_policy=...)``).
        metric: the searcher metric ``"best"`` compares (``exp_conf['searcher']['metric']``).
        smaller_is_better: whether a smaller ``metric`` is better.
        metric_configured: whether ``exp_conf`` names ``metric`` (else it is the default).

    Raises:
        ValueError: ``policy`` is none of ``POLICIES``.
    """

    policy: str = "best"
    metric: str = "validation_loss"
    smaller_is_better: bool = True
    metric_configured: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(
                f"CheckpointPolicy(policy={self.policy!r}) is not a checkpoint policy. Expected "
                f"one of {', '.join(POLICIES)}."
            )

    def is_better(self, value: float, best: Optional[float]) -> bool:
        """Whether ``value`` beats ``best`` (None: nothing yet, so it does).

        >>> CheckpointPolicy().is_better(1.0, 2.0), CheckpointPolicy().is_better(2.0, 2.0)
        (True, False)
        """
        if best is None:
            return True
        return value < best if self.smaller_is_better else value > best

    def searcher_value(self, metrics: Mapping[str, Any]) -> float:
        """``metrics[metric]`` as a float.

        Raises:
            RuntimeError: the validation did not report the metric, or not as a scalar.
        """
        if self.metric not in metrics:
            raise RuntimeError(
                f"Search method is configured to use metric '{self.metric}' but model definition "
                f"returned validation metrics {sorted(metrics)}. The metric used by "
                "checkpoint_policy='best' must be one of the validation metrics: set "
                "exp_conf['searcher']['metric'] to one of them."
            )
        value = metrics[self.metric]
        if not is_numerical_scalar(value):
            raise RuntimeError(
                f"Searcher validation metric '{self.metric}' returned a non-scalar value: {value}. "
                "checkpoint_policy='best' compares it across validations: reduce it to one "
                "number in the trial's evaluation, or set exp_conf['searcher']['metric'] to a "
                "scalar metric."
            )
        return float(value)

    def value_if_reported(self, metrics: Mapping[str, Any]) -> Optional[float]:
        """The searcher metric of ``metrics`` for the checkpoint's record: required under
        ``"best"`` (``searcher_value``'s error if missing), else None when not a number."""
        if self.policy == "best":
            return self.searcher_value(metrics)
        value: Any = metrics.get(self.metric)
        return float(value) if is_numerical_scalar(value) else None


@dataclasses.dataclass(frozen=True)
class Decision:
    """``after_validation``'s answer.

    Args:
        checkpoint: checkpoint now (unless the checkpoint is current already).
        policy: the policy from now on (another one only when ``"best"`` falls back to ``"all"``).
        warning: what to log once, on that fall-back.
    """

    checkpoint: bool
    policy: CheckpointPolicy
    warning: Optional[str] = None


def after_validation(
    policy: CheckpointPolicy, metrics: Mapping[str, Any], best: Optional[float]
) -> Decision:
    """Whether ``policy`` checkpoints after a validation that reported ``metrics``, given the
    trial's best searcher value so far (``best``; None: none yet).

    Raises:
        RuntimeError: under ``"best"``, the metric is missing (and was configured) or not a
            scalar; the message names the fix.

    >>> after_validation(CheckpointPolicy(), {"validation_loss": 0.5}, best=0.7).checkpoint
    True
    >>> fell_back = after_validation(CheckpointPolicy(), {"acc": 0.9}, best=None)
    >>> fell_back.checkpoint, fell_back.policy.policy
    (True, 'all')
    """
    if policy.policy == "all":
        return Decision(True, policy)
    if policy.policy == "none":
        return Decision(False, policy)
    if policy.metric not in metrics and not policy.metric_configured:
        return Decision(
            True, dataclasses.replace(policy, policy="all"), _fall_back(policy, metrics)
        )
    return Decision(policy.is_better(policy.searcher_value(metrics), best), policy)


def _fall_back(policy: CheckpointPolicy, metrics: Mapping[str, Any]) -> str:
    """No searcher metric was configured and the default one is not reported: keep
    Determined's local behaviour (checkpoint after every validation) instead of failing a
    script that never asked for 'best'."""
    return (
        f"checkpoint_policy='best' compares '{policy.metric}', which the trial does not report "
        f"(it reports {sorted(metrics)}); falling back to 'all' as Determined's local mode "
        "does. Set exp_conf={'searcher': {'metric': ..., 'smaller_is_better': ...}} to keep "
        "only the best checkpoints."
    )


def is_numerical_scalar(value: Any) -> bool:
    """Whether ``value`` is one number (a bool is not): a Python or numpy int or float, or a
    0-dimensional int or float array.

    >>> [is_numerical_scalar(v) for v in (1, 2.5, np.float32(2), np.array(3), np.zeros(2), True)]
    [True, True, True, True, False, False]
    """
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float, np.integer, np.floating)):
        return True
    return isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf"
