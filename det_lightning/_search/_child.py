"""Inside a command trial of a search: report its validations to the search's study.

``det-lightning experiment`` starts a command entrypoint (``python3 train.py``) as a child
process with ``$DET_LIGHTNING_SEARCH`` naming the storage, the study, the trial and its
bracket; ``pytorch.Trainer.fit`` then adds the ``SearchReporter``. A model_def trial's process
(``_jobs.legacy_job``) is given the same variable and reports the same way.
A script that raises ``det.InvalidHP`` records it on its trial (``report_invalid_hp``) and
exits 0, as Determined's harness reports the early exit to the master: the search then drops
the trial and starts another, as for a model_def trial.
"""

import json
import os
import pathlib
from typing import Any, Dict

import optuna

from det_lightning._env import SEARCH_ENV
from det_lightning._search._asha import Bracket
from det_lightning._search._reporter import INVALID_HP, SearchReporter
from det_lightning._search._runner import open_storage
from det_lightning._search._settings import SearchSettings


def search_environment(storage: str, study_name: str, trial_id: int, settings: SearchSettings,
                       bracket: Bracket) -> str:
    """The value of ``$DET_LIGHTNING_SEARCH`` for one trial."""
    return json.dumps({
        "storage": storage, "study": study_name, "trial_id": trial_id,
        "metric": settings.metric, "smaller_is_better": settings.smaller_is_better,
        "time_metric": settings.time_metric, "max_time": settings.max_time,
        "max_trials": settings.max_trials, "divisor": settings.divisor,
        "bracket": {"num_rungs": bracket.num_rungs, "max_trials": bracket.max_trials,
                    "max_concurrent_trials": bracket.max_concurrent_trials,
                    "rung_units": list(bracket.rung_units)},
    })


def _search_trial() -> optuna.Trial:
    """The search's trial this process trains, from ``$DET_LIGHTNING_SEARCH``."""
    spec: Dict[str, Any] = json.loads(os.environ[SEARCH_ENV])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(spec["storage"], pathlib.Path("."))
    study = optuna.load_study(study_name=spec["study"], storage=storage)
    return optuna.trial.Trial(study, int(spec["trial_id"]))


def report_invalid_hp(message: str) -> None:
    """Records on the search's trial that its script raised ``InvalidHP(message)``."""
    _search_trial().set_user_attr(INVALID_HP, message or "InvalidHP")


def attach_reporter(trial: Any, context: Any, max_length: Any) -> None:
    """Adds the search's reporter to ``trial``'s callbacks (on the chief: it reports);
    ``max_length``: what the script's ``fit()`` trains for."""
    from det_lightning._experiment import _add_callbacks
    spec: Dict[str, Any] = json.loads(os.environ[SEARCH_ENV])
    bracket = Bracket(spec["bracket"]["num_rungs"], spec["bracket"]["max_trials"],
                      spec["bracket"]["max_concurrent_trials"],
                      tuple(spec["bracket"]["rung_units"]))
    settings = SearchSettings(spec["metric"], spec["smaller_is_better"], spec["time_metric"],
                            spec["max_time"], spec["max_trials"], spec["divisor"], [bracket])
    if context.distributed.rank != 0:
        return
    live = _search_trial()
    study = live.study
    _add_callbacks(trial, {"_det_lightning_search": SearchReporter(
        study, live, settings, bracket, context, max_length)})
