"""A worker asking the search for its next trial: the bracket furthest from its share, a
trial asked there (its hyperparameters drawn, or the grid's next point), and its admission
within the budget (a trial asked past it by two workers at once is dropped unrun)."""

import functools
import logging
import os
import warnings
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import optuna
from optuna.exceptions import UpdateFinishedTrialError

from det_lightning._runner._asha import Bracket
from det_lightning._runner._lease import (
    SURPLUS,
    TRIAL_NUMBER,
    host_id,
    number_new_trial,
    origin,
    search_name,
    superseded_now,
)
from det_lightning._runner._optuna import trial_id
from det_lightning._runner._search_settings import SearchSettings
from det_lightning._runner._serial import creating
from det_lightning._runner._trial_record import GRID_POINT, HOST, HPARAMS, PID, TRIAL_SEED
from det_lightning._runner.search._grid import has_waiting_point, owns_point
from det_lightning._runner.search._reporter import counted, trial_number
from det_lightning._runner.search._sample import point_index, suggest, trial_draw

logger = logging.getLogger("det_lightning")


def admitted(
    study: optuna.Study, trial: optuna.Trial, settings: SearchSettings, bracket: Bracket
) -> bool:
    """Whether a trial ``study.ask()`` just gave is within the search: its own grid point, or
    fewer than the bracket's max_trials counted trials asked for before it."""
    trials = study.get_trials(deepcopy=False)
    me = next(t for t in trials if trial_id(t) == trial_id(trial))
    if settings.grid:
        return owns_point(trials, me)
    place, number = origin(me), trial_number(me)
    earlier = {
        trial_number(t)
        for t in trials
        if origin(t) < place and counted(t) and trial_number(t) != number
    }
    return len(earlier) < bracket.max_trials


def next_bracket(studies: Sequence[optuna.Study], settings: SearchSettings) -> Optional[int]:
    """The bracket furthest from its share of max_trials (InvalidHP trials do not count: a
    new trial replaces each), or for a grid its study while a point waits (a point whose
    trial raised InvalidHP is done, as in Determined)."""
    if settings.grid:
        return 0 if has_waiting_point(studies[0]) else None
    if settings.searcher == "single":  # its one trial, whatever became of it (InvalidHP too)
        states = (optuna.trial.TrialState.WAITING,)
        done = any(not t.user_attrs.get(SURPLUS) for t in studies[0].get_trials(deepcopy=False))
        return 0 if studies[0].get_trials(deepcopy=False, states=states) or not done else None
    for index, study in enumerate(studies):  # a taken-over trial's continuation goes first
        if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            return index
    best: Optional[Tuple[float, int]] = None
    for index, (study, bracket) in enumerate(zip(studies, settings.brackets)):
        started = len({trial_number(t) for t in study.get_trials(deepcopy=False) if counted(t)})
        if started < bracket.max_trials:
            share = started / bracket.max_trials
            if best is None or share < best[0]:
                best = (share, index)
    return None if best is None else best[1]


def _ask(
    study: optuna.Study,
    settings: SearchSettings,
    index: int,
    space: Dict[str, Any],
    *,
    seed: Optional[int],
) -> Optional[optuna.Trial]:
    """A new trial of ``study`` with its hyperparameters, or None when another worker filled
    the budget first (the trial asked for is then dropped unrun); or the continuation of a
    trial another worker took over, if one was waiting. Created and numbered one process at a
    time (``_serial.creating``)."""
    with creating(study, search_name(study)) as serialized:
        trial = study.ask()
        if TRIAL_NUMBER not in trial.user_attrs:
            number_new_trial(study, trial, serialized=serialized)
    return _admit(study, settings, index, trial, space=space, seed=seed)


def _unless_taken_over(admit: Callable[..., Optional[optuna.Trial]]) -> Any:
    """``admit``, or None when another worker took the trial over before this one leased it
    (a trial asked for but not leased for ``--heartbeat-timeout`` seconds looks abandoned: a
    worker slowed down that long, e.g. among many on few cores, finds it finished)."""

    @functools.wraps(admit)
    def guarded(study: optuna.Study, *args: Any, **kwargs: Any) -> Optional[optuna.Trial]:
        try:
            return admit(study, *args, **kwargs)
        except (UpdateFinishedTrialError, ValueError):  # study.tell(): "Cannot tell a FAIL trial"
            if not superseded_now(study, trial_id(args[2])):
                raise
            logger.warning("a trial this worker asked for was taken over before it began")
            return None

    return guarded


@_unless_taken_over
def _admit(
    study: optuna.Study,
    settings: SearchSettings,
    index: int,
    trial: optuna.Trial,
    *,
    space: Dict[str, Any],
    seed: Optional[int],
) -> Optional[optuna.Trial]:
    """``trial`` with its hyperparameters and seed drawn (``_sample.trial_draw``), or None
    (told FAIL as surplus) when it is past the budget. A continuation of a trial that had
    drawn them keeps them."""
    if HPARAMS in trial.user_attrs:  # a continuation
        _suggest(trial, space)  # its own point again (fixed), so the study records it
        return trial
    if TRIAL_NUMBER not in trial.user_attrs:  # a continuation from an older version
        with creating(study, search_name(study)) as serialized:
            number_new_trial(study, trial, serialized=serialized)
    # The sampler is read when the trial draws (suggest), not when it is asked for.
    trials = study.get_trials(deepcopy=False)
    me = next(t for t in trials if trial_id(t) == trial_id(trial))
    draw = trial_draw(
        settings.searcher,
        space,
        seed,
        index,
        point_index(trials, origin(me), SURPLUS),
        me.user_attrs.get(GRID_POINT),
    )
    study.sampler = draw.sampler
    if not admitted(study, trial, settings, settings.brackets[index]):
        trial.set_user_attr(SURPLUS, True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return None
    trial.set_user_attr(HPARAMS, _suggest(trial, space))
    trial.set_user_attr(TRIAL_SEED, draw.trial_seed)
    trial.set_user_attr(HOST, host_id())
    trial.set_user_attr(PID, os.getpid())
    return trial


def _suggest(trial: optuna.Trial, space: Dict[str, Any]) -> Dict[str, Any]:
    with warnings.catch_warnings():
        # A grid's last double can be one ulp past maxval, as in Determined (``config._search``).
        warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")
        return suggest(trial, space)
