"""``determined.experimental.client``: the functions, methods and enums post-training code
calls take the real Determined 0.38.1's arguments, by the same names and in the same order,
and its enums have the same members (what each does locally: tests/integration/test_client.py).
"""

import enum
import inspect
from typing import Any, Callable, List, Tuple

import pytest

from det_lightning.experimental import client as ours

pytestmark = pytest.mark.interop

FUNCTIONS = [
    "login",
    "create_experiment",
    "get_experiment",
    "list_experiments",
    "get_trial",
    "get_checkpoint",
    "logout",
    "iter_trials_metrics",
    "stream_trials_metrics",
    "stream_trials_validation_metrics",
]
METHODS = {
    "Determined": [
        "__init__",
        "create_experiment",
        "get_experiment",
        "list_experiments",
        "get_trial",
        "get_checkpoint",
        "iter_trials_metrics",
    ],
    "Experiment": [
        "reload",
        "wait",
        "list_trials",
        "iter_trials",
        "get_trials",
        "await_first_trial",
        "list_checkpoints",
        "top_checkpoint",
        "top_n_checkpoints",
        "pause",
        "kill",
        "cancel",
        "activate",
        "download_code",
    ],
    "Trial": [
        "reload",
        "get_experiment",
        "list_checkpoints",
        "get_checkpoints",
        "top_checkpoint",
        "select_checkpoint",
        "iter_metrics",
        "stream_metrics",
        "stream_validation_metrics",
    ],
    "Checkpoint": [
        "download",
        "write_metadata_file",
        "add_metadata",
        "remove_metadata",
        "delete",
    ],
}
ENUMS = [
    "OrderBy",
    "CheckpointSortBy",
    "CheckpointState",
    "DownloadMode",
    "ExperimentSortBy",
    "ExperimentState",
    "TrialSortBy",
    "TrialState",
]


def _positional(function: Callable[..., Any]) -> List[Tuple[str, bool]]:
    """The parameters a caller may pass by position or by name: each name, and whether it
    has a default."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [
        (p.name, p.default is not inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
        if p.kind in kinds
    ]


def test_the_functions_take_determineds_arguments() -> None:
    from determined.experimental import client as real

    for name in FUNCTIONS:
        assert _positional(getattr(ours, name)) == _positional(getattr(real, name)), name


@pytest.mark.parametrize("cls", sorted(METHODS))
def test_the_methods_take_determineds_arguments(cls: str) -> None:
    from determined.experimental import client as real

    for name in METHODS[cls]:
        theirs = getattr(getattr(real, cls), name)
        mine = getattr(getattr(ours, cls), name)
        assert _positional(mine) == _positional(theirs), f"{cls}.{name}"


@pytest.mark.parametrize("name", ENUMS)
def test_the_enums_have_determineds_members(name: str) -> None:
    from determined.experimental import client as real

    real_enum, our_enum = getattr(real, name), getattr(ours, name)
    assert issubclass(our_enum, enum.Enum)
    assert set(real_enum.__members__) == set(our_enum.__members__)


def test_the_attributes_post_training_code_reads() -> None:
    """Every public attribute Determined's objects set in ``__init__``, the local ones have."""
    from determined.experimental import client as real

    session = ours.Determined()
    made = [
        (real.Checkpoint(None, "u"), ours.Checkpoint(session, "u")),
        (real.Trial(1, None), ours.Trial("e/1", session)),
        (real.Experiment(1, None), ours.Experiment("e", session)),
    ]
    for theirs, mine in made:
        for attribute in [k for k in vars(theirs) if not k.startswith("_")]:
            assert hasattr(mine, attribute), f"{type(mine).__name__}.{attribute}"
    assert made[2][1].id == "e" and made[1][1].id == 1


def test_a_metrics_report_has_determineds_fields() -> None:
    import dataclasses

    from determined.experimental import client as real

    theirs = [f.name for f in dataclasses.fields(real.TrialMetrics)]
    assert [f.name for f in dataclasses.fields(ours.TrialMetrics)] == theirs
