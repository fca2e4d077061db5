"""``after_validation()``: the checkpoint policy's decision after a validation, on a table over
every combination of policy, reported metric, best so far, direction and configuration."""

import dataclasses
import math
from typing import Any, Dict, Optional

import numpy as np
import pytest

from det_lightning.pytorch._checkpoint_policy import (
    CheckpointPolicy,
    Decision,
    after_validation,
    is_numerical_scalar,
)

ABSENT = "ABSENT"  # the validation does not report the metric
NAN = math.nan
CKPT, SKIP = "checkpoint", "skip"
FALL_BACK = "checkpoint; 'all' from now on, with a warning"
MISSING = "RuntimeError: metric missing"

TABLE = [
    # policy, the metric's value, best so far, smaller_is_better, metric configured, expected
    # "best": the metric beats the best so far (None: no checkpoint yet), in the
    # direction smaller_is_better says; a tie does not. Missing: an error if configured,
    # else "all" from now on. NaN: never better than a number, but the first is kept.
    ("best", ABSENT, None, True, True, MISSING),
    ("best", ABSENT, None, True, False, FALL_BACK),
    ("best", ABSENT, None, False, True, MISSING),
    ("best", ABSENT, None, False, False, FALL_BACK),
    ("best", ABSENT, 0.7, True, True, MISSING),
    ("best", ABSENT, 0.7, True, False, FALL_BACK),
    ("best", ABSENT, 0.7, False, True, MISSING),
    ("best", ABSENT, 0.7, False, False, FALL_BACK),
    ("best", ABSENT, 0.5, True, True, MISSING),
    ("best", ABSENT, 0.5, True, False, FALL_BACK),
    ("best", ABSENT, 0.5, False, True, MISSING),
    ("best", ABSENT, 0.5, False, False, FALL_BACK),
    ("best", ABSENT, 0.3, True, True, MISSING),
    ("best", ABSENT, 0.3, True, False, FALL_BACK),
    ("best", ABSENT, 0.3, False, True, MISSING),
    ("best", ABSENT, 0.3, False, False, FALL_BACK),
    ("best", NAN, None, True, True, CKPT),
    ("best", NAN, None, True, False, CKPT),
    ("best", NAN, None, False, True, CKPT),
    ("best", NAN, None, False, False, CKPT),
    ("best", NAN, 0.7, True, True, SKIP),
    ("best", NAN, 0.7, True, False, SKIP),
    ("best", NAN, 0.7, False, True, SKIP),
    ("best", NAN, 0.7, False, False, SKIP),
    ("best", NAN, 0.5, True, True, SKIP),
    ("best", NAN, 0.5, True, False, SKIP),
    ("best", NAN, 0.5, False, True, SKIP),
    ("best", NAN, 0.5, False, False, SKIP),
    ("best", NAN, 0.3, True, True, SKIP),
    ("best", NAN, 0.3, True, False, SKIP),
    ("best", NAN, 0.3, False, True, SKIP),
    ("best", NAN, 0.3, False, False, SKIP),
    ("best", 0.5, None, True, True, CKPT),
    ("best", 0.5, None, True, False, CKPT),
    ("best", 0.5, None, False, True, CKPT),
    ("best", 0.5, None, False, False, CKPT),
    ("best", 0.5, 0.7, True, True, CKPT),
    ("best", 0.5, 0.7, True, False, CKPT),
    ("best", 0.5, 0.7, False, True, SKIP),
    ("best", 0.5, 0.7, False, False, SKIP),
    ("best", 0.5, 0.5, True, True, SKIP),
    ("best", 0.5, 0.5, True, False, SKIP),
    ("best", 0.5, 0.5, False, True, SKIP),
    ("best", 0.5, 0.5, False, False, SKIP),
    ("best", 0.5, 0.3, True, True, SKIP),
    ("best", 0.5, 0.3, True, False, SKIP),
    ("best", 0.5, 0.3, False, True, CKPT),
    ("best", 0.5, 0.3, False, False, CKPT),
    # "all": every validation, whatever the metric.
    ("all", ABSENT, None, True, True, CKPT),
    ("all", ABSENT, None, True, False, CKPT),
    ("all", ABSENT, None, False, True, CKPT),
    ("all", ABSENT, None, False, False, CKPT),
    ("all", ABSENT, 0.7, True, True, CKPT),
    ("all", ABSENT, 0.7, True, False, CKPT),
    ("all", ABSENT, 0.7, False, True, CKPT),
    ("all", ABSENT, 0.7, False, False, CKPT),
    ("all", ABSENT, 0.5, True, True, CKPT),
    ("all", ABSENT, 0.5, True, False, CKPT),
    ("all", ABSENT, 0.5, False, True, CKPT),
    ("all", ABSENT, 0.5, False, False, CKPT),
    ("all", ABSENT, 0.3, True, True, CKPT),
    ("all", ABSENT, 0.3, True, False, CKPT),
    ("all", ABSENT, 0.3, False, True, CKPT),
    ("all", ABSENT, 0.3, False, False, CKPT),
    ("all", NAN, None, True, True, CKPT),
    ("all", NAN, None, True, False, CKPT),
    ("all", NAN, None, False, True, CKPT),
    ("all", NAN, None, False, False, CKPT),
    ("all", NAN, 0.7, True, True, CKPT),
    ("all", NAN, 0.7, True, False, CKPT),
    ("all", NAN, 0.7, False, True, CKPT),
    ("all", NAN, 0.7, False, False, CKPT),
    ("all", NAN, 0.5, True, True, CKPT),
    ("all", NAN, 0.5, True, False, CKPT),
    ("all", NAN, 0.5, False, True, CKPT),
    ("all", NAN, 0.5, False, False, CKPT),
    ("all", NAN, 0.3, True, True, CKPT),
    ("all", NAN, 0.3, True, False, CKPT),
    ("all", NAN, 0.3, False, True, CKPT),
    ("all", NAN, 0.3, False, False, CKPT),
    ("all", 0.5, None, True, True, CKPT),
    ("all", 0.5, None, True, False, CKPT),
    ("all", 0.5, None, False, True, CKPT),
    ("all", 0.5, None, False, False, CKPT),
    ("all", 0.5, 0.7, True, True, CKPT),
    ("all", 0.5, 0.7, True, False, CKPT),
    ("all", 0.5, 0.7, False, True, CKPT),
    ("all", 0.5, 0.7, False, False, CKPT),
    ("all", 0.5, 0.5, True, True, CKPT),
    ("all", 0.5, 0.5, True, False, CKPT),
    ("all", 0.5, 0.5, False, True, CKPT),
    ("all", 0.5, 0.5, False, False, CKPT),
    ("all", 0.5, 0.3, True, True, CKPT),
    ("all", 0.5, 0.3, True, False, CKPT),
    ("all", 0.5, 0.3, False, True, CKPT),
    ("all", 0.5, 0.3, False, False, CKPT),
    # "none": never after a validation.
    ("none", ABSENT, None, True, True, SKIP),
    ("none", ABSENT, None, True, False, SKIP),
    ("none", ABSENT, None, False, True, SKIP),
    ("none", ABSENT, None, False, False, SKIP),
    ("none", ABSENT, 0.7, True, True, SKIP),
    ("none", ABSENT, 0.7, True, False, SKIP),
    ("none", ABSENT, 0.7, False, True, SKIP),
    ("none", ABSENT, 0.7, False, False, SKIP),
    ("none", ABSENT, 0.5, True, True, SKIP),
    ("none", ABSENT, 0.5, True, False, SKIP),
    ("none", ABSENT, 0.5, False, True, SKIP),
    ("none", ABSENT, 0.5, False, False, SKIP),
    ("none", ABSENT, 0.3, True, True, SKIP),
    ("none", ABSENT, 0.3, True, False, SKIP),
    ("none", ABSENT, 0.3, False, True, SKIP),
    ("none", ABSENT, 0.3, False, False, SKIP),
    ("none", NAN, None, True, True, SKIP),
    ("none", NAN, None, True, False, SKIP),
    ("none", NAN, None, False, True, SKIP),
    ("none", NAN, None, False, False, SKIP),
    ("none", NAN, 0.7, True, True, SKIP),
    ("none", NAN, 0.7, True, False, SKIP),
    ("none", NAN, 0.7, False, True, SKIP),
    ("none", NAN, 0.7, False, False, SKIP),
    ("none", NAN, 0.5, True, True, SKIP),
    ("none", NAN, 0.5, True, False, SKIP),
    ("none", NAN, 0.5, False, True, SKIP),
    ("none", NAN, 0.5, False, False, SKIP),
    ("none", NAN, 0.3, True, True, SKIP),
    ("none", NAN, 0.3, True, False, SKIP),
    ("none", NAN, 0.3, False, True, SKIP),
    ("none", NAN, 0.3, False, False, SKIP),
    ("none", 0.5, None, True, True, SKIP),
    ("none", 0.5, None, True, False, SKIP),
    ("none", 0.5, None, False, True, SKIP),
    ("none", 0.5, None, False, False, SKIP),
    ("none", 0.5, 0.7, True, True, SKIP),
    ("none", 0.5, 0.7, True, False, SKIP),
    ("none", 0.5, 0.7, False, True, SKIP),
    ("none", 0.5, 0.7, False, False, SKIP),
    ("none", 0.5, 0.5, True, True, SKIP),
    ("none", 0.5, 0.5, True, False, SKIP),
    ("none", 0.5, 0.5, False, True, SKIP),
    ("none", 0.5, 0.5, False, False, SKIP),
    ("none", 0.5, 0.3, True, True, SKIP),
    ("none", 0.5, 0.3, True, False, SKIP),
    ("none", 0.5, 0.3, False, True, SKIP),
    ("none", 0.5, 0.3, False, False, SKIP),
]


def outcome(decision: Decision, policy: CheckpointPolicy) -> str:
    if decision.policy == policy:
        assert decision.warning is None
        return CKPT if decision.checkpoint else SKIP
    assert decision.policy == dataclasses.replace(policy, policy="all")
    assert decision.checkpoint and decision.warning is not None
    return FALL_BACK


@pytest.mark.parametrize("name,value,best,smaller,configured,expected", TABLE)
def test_the_decision_table(
    name: str, value: Any, best: Optional[float], smaller: bool, configured: bool, expected: str
) -> None:
    policy = CheckpointPolicy(
        policy=name, metric="loss", smaller_is_better=smaller, metric_configured=configured
    )
    metrics: Dict[str, Any] = {"acc": 0.1} if value is ABSENT else {"loss": value, "acc": 0.1}
    try:
        got = outcome(after_validation(policy, metrics, best), policy)
    except RuntimeError as e:
        assert "Search method is configured to use metric 'loss'" in str(e)
        got = MISSING
    assert got == expected


def test_the_table_covers_every_combination() -> None:
    keys = {(row[0], "NaN" if row[1] is NAN else row[1], *row[2:5]) for row in TABLE}
    assert len(keys) == len(TABLE) == 3 * 3 * 4 * 2 * 2  # no row twice, none left out


def test_falling_back_warns_once_and_keeps_the_rest_of_the_policy() -> None:
    policy = CheckpointPolicy(metric="validation_loss", smaller_is_better=False)
    first = after_validation(policy, {"b": 1.0, "a": 2.0}, best=None)
    assert first.policy == CheckpointPolicy(
        policy="all", metric="validation_loss", smaller_is_better=False
    )
    assert first.warning == (
        "checkpoint_policy='best' compares 'validation_loss', which the trial does not report "
        "(it reports ['a', 'b']); falling back to 'all' as Determined's local mode does. Set "
        "exp_conf={'searcher': {'metric': ..., 'smaller_is_better': ...}} to keep only the best "
        "checkpoints."
    )
    second = after_validation(first.policy, {"a": 3.0}, best=None)
    assert second == Decision(True, first.policy, None)  # no second warning
    assert policy.policy == "best"  # the setting itself never changes


def test_a_missing_configured_metric_names_the_fix() -> None:
    policy = CheckpointPolicy(metric="acc", metric_configured=True)
    with pytest.raises(RuntimeError) as raised:
        after_validation(policy, {"loss": 1.0, "b": 2.0}, best=None)
    assert str(raised.value) == (
        "Search method is configured to use metric 'acc' but model definition returned "
        "validation metrics ['b', 'loss']. The metric used by checkpoint_policy='best' must be "
        "one of the validation metrics: set exp_conf['searcher']['metric'] to one of them."
    )


@pytest.mark.parametrize("configured", [True, False])
@pytest.mark.parametrize("value", [[1.0, 2.0], "0.5", True, np.zeros(2), None])
def test_a_non_scalar_metric_is_an_error_under_best(value: Any, configured: bool) -> None:
    policy = CheckpointPolicy(metric="loss", metric_configured=configured)
    with pytest.raises(RuntimeError, match="returned a non-scalar value") as raised:
        after_validation(policy, {"loss": value}, best=None)
    assert str(raised.value).startswith(
        f"Searcher validation metric 'loss' returned a non-scalar value: {value}. "
    )
    assert "exp_conf['searcher']['metric']" in str(raised.value)  # the fix
    for other in ("all", "none"):  # only 'best' reads the metric
        after_validation(dataclasses.replace(policy, policy=other), {"loss": value}, best=None)


@pytest.mark.parametrize(
    "value,expected",
    [(np.float32(0.5), True), (np.array(0.5), True), (np.int64(0), True), (0, True)],
)
def test_numpy_and_int_values_are_compared(value: Any, expected: bool) -> None:
    decision = after_validation(CheckpointPolicy(metric="m"), {"m": value}, best=0.7)
    assert decision.checkpoint is expected


def test_a_nan_best_so_far_is_never_beaten() -> None:
    # As Determined's _is_best_validation: NaN compares False both ways.
    for smaller in (True, False):
        policy = CheckpointPolicy(metric="m", smaller_is_better=smaller)
        assert not after_validation(policy, {"m": 0.5}, best=NAN).checkpoint


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match=r"CheckpointPolicy\(policy='sometimes'\)"):
        CheckpointPolicy(policy="sometimes")


def test_the_policy_is_frozen_and_keyword_only() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CheckpointPolicy().policy = "all"  # type: ignore[misc]
    with pytest.raises(TypeError):
        CheckpointPolicy("all")  # type: ignore[misc]


@pytest.mark.parametrize(
    "value,expected",
    [(1, True), (2.5, True), (np.float16(1), True), (np.array(3), True), (np.uint8(1), True)]
    + [(True, False), (np.bool_(True), False), (np.array([1.0]), False), (1j, False)]
    + [(np.array(1j), False), ("1", False), (None, False)],
)
def test_what_counts_as_one_number(value: Any, expected: bool) -> None:
    assert is_numerical_scalar(value) is expected
