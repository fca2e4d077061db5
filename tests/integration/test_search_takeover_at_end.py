"""A trial whose process ends after another worker took it over, before its worker noticed.

Worker A runs a search's trial to its end in a process of its own (the production launch,
``_jobs.run_trial``); right after that process exits, and before A records how it ended, worker
B takes the trial over through its own storage object (the launch is wrapped so the takeover
happens at exactly that point). A's lease keeper has not noticed (its event is never set). A
must end the trial with ``LeaseLost``, the clear error, not with the error Optuna gives for
writing to a finished trial, and must leave B's continuation as B made it.
"""

import pathlib
import threading
from typing import Any, List, Optional

import optuna
import pytest
import yaml
from optuna.exceptions import UpdateFinishedTrialError

from det_lightning._runner._lease import CONTINUES, LeaseLost, is_superseded, take_over
from det_lightning._runner._template import TrialRequest, TrialStarter
from det_lightning._runner.config import load_config
from det_lightning._runner.plan import plan_experiment
from det_lightning._runner.search._interrupt import SearchInterrupt
from det_lightning._runner.search._jobs import run_trial
from det_lightning._runner.search._reporter import trial_number
from det_lightning._runner.search._storage import open_storage, open_studies, storage_ref
from det_lightning._runner.search._worker import TrialRun, WorkerSetup, _ask, _run_trial
from tests.integration.cli_support import PROJECT

pytestmark = pytest.mark.slow

CONFIG = """
name: late-end
entrypoint: model_def:RegressionTrial
hyperparameters:
  global_batch_size: 8
  learning_rate: 0.01
  hidden_size: 4
searcher:
  name: random
  metric: validation_loss
  smaller_is_better: true
  max_trials: 1
  max_length:
    batches: 4
min_validation_period:
  batches: 2
"""


@pytest.mark.parametrize(
    "storage_kind",
    ["journal", "postgres"],
)
def test_a_trial_ending_after_a_takeover_ends_with_lease_lost_and_leaves_the_new_owner_be(
    checkpoint_dir: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    storage_kind: str,
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # the trial runs in the fixture project
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    url = str(checkpoint_dir / "search.journal")
    if storage_kind == "postgres":
        url = request.getfixturevalue("postgres_url")
    plan = plan_experiment(load_config(yaml.safe_load(CONFIG)), PROJECT)
    settings = plan.search
    assert settings is not None
    seed = plan.config.reproducibility_config.experiment_seed
    (study_a,) = open_studies(
        open_storage(url, plan.checkpoint_root), plan.experiment_id, settings, seed=seed
    )
    trial = _ask(
        study_a,
        settings,
        0,
        plan.config.hyperparameters,
        seed=seed,
    )
    assert trial is not None
    study_b = optuna.load_study(  # worker B's own view of the search
        study_name=study_a.study_name, storage=open_storage(url, plan.checkpoint_root)
    )
    continuations: List[Optional[optuna.Trial]] = []
    statuses: List[Optional[int]] = []

    with SearchInterrupt() as interrupt, TrialStarter() as starter:

        def launch(request: TrialRequest, lost: Any) -> Optional[int]:
            statuses.append(run_trial(starter, interrupt, request, lost))
            (frozen,) = study_b.get_trials(deepcopy=False)  # the trial's process has ended
            continuations.append(take_over(study_b, frozen))
            return statuses[-1]

        worker = WorkerSetup(plan, settings, storage_ref(url, plan.checkpoint_root), launch)
        keeper_noticed = threading.Event()  # A's lease keeper: it has not renewed since
        run = TrialRun(
            worker,
            study_a,
            settings.brackets[0],
            trial,
            trial_number(trial),
            trial.user_attrs["hparams"],
            trial.user_attrs["trial_seed"],
            False,
            keeper_noticed,
        )
        with pytest.raises(LeaseLost) as raised:
            _run_trial(run)

    assert statuses == [0]  # the trial itself completed
    message = str(raised.value)
    number = trial_number(trial)
    assert message.startswith(f"trial {number} was taken over by another worker"), message
    assert "resumes the trial from its latest checkpoint" in message
    assert "--heartbeat-timeout" in message  # what to do, if anything
    # What A tried to record was refused by the storage (the trial was finished by B).
    assert isinstance(raised.value.__cause__, (UpdateFinishedTrialError, ValueError))
    (continuation,) = continuations
    assert continuation is not None
    old, new = study_b.get_trials(deepcopy=False)
    assert old.state == optuna.trial.TrialState.FAIL and is_superseded(old)
    assert "checkpoint" not in old.user_attrs and "batches" not in old.user_attrs
    # B's continuation is as B made it: RUNNING, no value, nothing of A's end on it.
    assert new._trial_id == continuation._trial_id
    assert new.state == optuna.trial.TrialState.RUNNING and new.values is None
    assert new.user_attrs[CONTINUES] == old._trial_id
    assert "checkpoint" not in new.user_attrs and "batches" not in new.user_attrs
    assert new.user_attrs.get("hparams") == old.user_attrs["hparams"]
