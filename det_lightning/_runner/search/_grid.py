"""``grid`` on Optuna: the grid's points enqueued in one study, in Determined's trial order.

Determined lists the points (``newHyperparameterGrid`` in ``master/pkg/searcher/grid.go``:
hyperparameters in name order, the first varying slowest) and creates each trial from the end
of that list (``s.RemainingTrials[len(s.RemainingTrials)-1]``): its first trial gets the list's
last point (that list: ``_search_settings.grid_params``). Each worker enqueues the points its study lacks (user attribute ``grid_point``: the
point's place in that trial order) and takes them with ``study.ask()``, which hands each
waiting trial to one worker. Two workers opening a new search at the same moment may both
enqueue a point: the trial with the lower number keeps it and the other is dropped unrun.
"""

from typing import Any, Dict, Sequence

import optuna

from det_lightning._runner._lease import origin, trial_number
from det_lightning._runner._trial_record import GRID_POINT


def enqueue_grid(study: optuna.Study, grid: Sequence[Dict[str, Any]]) -> None:
    """Enqueues the points the study has no trial for yet (all of them in a new search)."""
    present = {t.user_attrs.get(GRID_POINT) for t in study.get_trials(deepcopy=False)}
    for index, params in enumerate(grid):
        if index not in present:
            study.enqueue_trial(dict(params), user_attrs={GRID_POINT: index})


def has_waiting_point(study: optuna.Study) -> bool:
    """Whether a grid point is still waiting for a worker."""
    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))


def owns_point(trials: Sequence[optuna.trial.FrozenTrial], trial: optuna.trial.FrozenTrial) -> bool:
    """Whether ``trial`` (from ``study.ask()``) runs its grid point: it has one (ask() made a
    fresh trial when another worker took the last point first) and no trial asked for before
    it has the same point (its own earlier runs, when it was taken over, aside)."""
    point = trial.user_attrs.get(GRID_POINT)
    if point is None:
        return False
    return all(
        origin(t) >= origin(trial) or trial_number(t) == trial_number(trial)
        for t in trials
        if t.user_attrs.get(GRID_POINT) == point
    )
