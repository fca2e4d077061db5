"""``get_batch_length`` during validation runs where Determined 0.38.1 calls it: on the batch
``evaluate_batch`` gets, before ``evaluate_batch`` runs (``_pytorch_trial.py``'s ``_validate``:
``to_device``, ``num_inputs += get_batch_length(batch)``, then ``evaluate_batch``), so an
``evaluate_batch`` that consumes its batch does not break the count."""

from typing import Any, Dict, List

from det_lightning import pytorch
from tests.fixtures.trials import make_trials

TRIALS = make_trials(pytorch)


class ConsumingTrial(TRIALS["MLPTrial"]):  # type: ignore[misc,valid-type,name-defined]
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.calls: List[str] = []

    def get_batch_length(self, batch: Any) -> int:
        self.calls.append(f"length:{len(batch)}")
        return len(batch[0])

    def evaluate_batch(self, batch: Any) -> Dict[str, Any]:
        metrics = super().evaluate_batch(batch)
        self.calls.append("evaluate")
        batch.clear()  # consumes its batch (collate's list): counted after this, it would fail
        return metrics


def test_get_batch_length_counts_each_batch_before_evaluate_batch_consumes_it(
    checkpoint_dir: Any,
) -> None:
    with pytorch.init(hparams={"lr": 0.01, "dropout": 0.0, "shuffle": False}) as context:
        trial = ConsumingTrial(context)
        batches = len(trial.build_validation_data_loader())
        pytorch.Trainer(trial, context, logger=False).fit(
            max_length=pytorch.Batch(2),
            validation_period=pytorch.Batch(2),
            checkpoint_policy="none",
        )
    assert batches >= 2
    assert trial.calls == ["length:2", "evaluate"] * batches
