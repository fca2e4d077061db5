"""The seed a search runs with: ``reproducibility.experiment_seed``, or one drawn for it.

Determined's master gives every experiment a seed: the config's, else one it picks (the clock,
``uint32(time.Now().Unix())``) and writes into the experiment's config, where users read it back
to repeat the experiment. Here the worker that creates a search's first study records the seed
on that study (user attribute ``experiment_seed``): the config's, else a random uint32 drawn
then (not the clock: experiments started in the same second would share it). Every worker and
every rerun reads it from there, and each trial gets the seed and point the master would give
that trial of an experiment with this seed::

    configured                          -> it
    recorded on bracket 0's study       -> it
    none recorded, a trial admitted     -> None: a search begun before seeds were recorded;
                                           each trial draws a seed of its own, as then
    none recorded, no trial admitted    -> its creator is recording it: wait for it; a creator
                                           killed in between leaves none, so after WAIT_S the
                                           waiting worker records one itself
"""

import logging
import secrets
import time
from typing import Callable, Optional

import optuna

from det_lightning._runner._trial_record import HPARAMS
from det_lightning.pytorch._seeds import MAX_EXPERIMENT_SEED

logger = logging.getLogger("det_lightning")

EXPERIMENT_SEED = "experiment_seed"  # the bracket-0 study's user attribute
WAIT_S = 30.0  # how long a worker waits for the study's creator to record the seed
POLL_S = 0.1


def draw_experiment_seed() -> int:
    """A seed for an experiment whose config sets none (uint32, as the master's)."""
    return secrets.randbelow(MAX_EXPERIMENT_SEED + 1)


def record_experiment_seed(study: optuna.Study, configured: Optional[int]) -> int:
    """Records the seed on the search's first study, just created; returns it."""
    seed = configured if configured is not None else draw_experiment_seed()
    study.set_user_attr(EXPERIMENT_SEED, seed)
    return seed


def recorded_experiment_seed(study: optuna.Study) -> Optional[int]:
    """The seed recorded on the search's first study, if any."""
    seed = study.user_attrs.get(EXPERIMENT_SEED)
    return None if seed is None else int(seed)


def experiment_seed(
    study: optuna.Study,
    configured: Optional[int],
    *,
    wait_s: float = WAIT_S,
    clock: Callable[[], float] = time.monotonic,
) -> Optional[int]:
    """The seed the search ``study`` (its first bracket's) runs with (the module's table).

    A search begun before seeds were recorded, with admitted trials and no seed, gets None: its
    trials keep drawing seeds of their own.
    """
    if configured is not None:
        return configured
    deadline = clock() + wait_s
    while True:
        seed = recorded_experiment_seed(study)
        if seed is not None:
            return seed
        # The seed is recorded before any trial is admitted (drawn: HPARAMS), so an admitted
        # trial with no seed recorded after it was seen marks a search begun before seeds were
        # recorded (a grid's waiting points are not admitted yet).
        admitted = any(HPARAMS in t.user_attrs for t in study.get_trials(deepcopy=False))
        seed = recorded_experiment_seed(study)
        if seed is not None:
            return seed
        if admitted:
            return None
        if clock() >= deadline:
            break
        time.sleep(POLL_S)
    seed = record_experiment_seed(study, None)
    logger.warning(
        f"the search's first study has no experiment seed after {wait_s:.0f} s (the worker "
        f"that created it stopped before recording one); recorded {seed}"
    )
    return seed


def drawn_seed_note(seed: int) -> str:
    """The log line that names a drawn seed and how to repeat the search with it."""
    return (
        f"experiment seed {seed}, drawn when the experiment began (reproducibility.experiment_seed "
        "is not set; set it to this value to repeat these trials' seeds and points)"
    )


__all__ = [
    "EXPERIMENT_SEED",
    "draw_experiment_seed",
    "drawn_seed_note",
    "experiment_seed",
    "record_experiment_seed",
    "recorded_experiment_seed",
]
