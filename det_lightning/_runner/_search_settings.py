"""``SearchSettings``: a ``grid``, ``random`` or ``adaptive_asha`` searcher section, read as
Determined 0.38 reads it.

Every searcher is a list of brackets, each one Optuna study: ``adaptive_asha`` has Determined's
brackets; ``grid`` and ``random`` have one bracket without rungs (a trial trains its full
length), holding ``max_trials`` trials, or the grid's points.
"""

import dataclasses
import hashlib
import json
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from det_lightning import errors
from det_lightning._runner._asha import Bracket, make_brackets
from det_lightning._runner.config import Lengths, grid_choices
from det_lightning._runner.config._searcher import SearcherConfig

_TIME_UNITS = ("batches", "epochs")


def search_key(raw: Dict[str, Any]) -> str:
    """Names this search's studies and its TensorBoard root: the same config continues the same
    search, on every worker and machine and in every rerun."""
    relevant = {k: raw.get(k) for k in ("name", "hyperparameters", "searcher", "entrypoint")}
    return hashlib.sha1(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:10]


def experiment_id(raw: Dict[str, Any]) -> str:
    """The experiment's identity: the same for every rerun of the same config, on every worker
    and machine; its checkpoints, TensorBoard runs and search storage live under it
    (``raw``: the config as given, ``ExperimentConfig.as_given``; an unnamed one is
    ``experiment-<key>``).

    >>> experiment_id({"name": "my exp", "searcher": {"name": "single"}})
    'my-exp-2c2b2e0849'
    """
    name = re.sub(r"[^\w.-]+", "-", str(raw.get("name") or "experiment")).strip("-.")
    return f"{name or 'experiment'}-{search_key(raw)}"


def grid_params(hparams: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The Optuna parameters of each grid point (what ``_sample.suggest`` reads back), in the
    order Determined creates the points' trials (``search._grid``).

    >>> grid_params({"lr": {"type": "log", "base": 10, "minval": -3, "maxval": -1, "count": 2},
    ...              "act": {"type": "categorical", "vals": ["relu", "tanh"]}, "size": 8})
    [{'act': 1, 'lr': -1.0}, {'act': 1, 'lr': -3.0}, {'act': 0, 'lr': -1.0}, {'act': 0, 'lr': -3.0}]
    """
    points = [
        {".".join(path): param for path, (param, _) in zip(paths, combo) if param is not None}
        for paths, combo in grid_choices(hparams)
    ]
    return points[::-1]


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """What a search needs, settled from the config.

    ``adaptive_asha``: ``time_metric`` + ``max_time`` (Determined 0.38) or the older
    ``max_length`` (batches, epochs, or records converted to batches with
    ``global_batch_size``). ``grid`` and ``random`` count validations in batches and train each
    trial for ``searcher.max_length`` (or the script's own length); ``grid`` lists the Optuna
    parameters of its points in the order Determined creates their trials.
    """

    metric: str
    smaller_is_better: bool
    time_metric: str
    max_time: int
    max_trials: int
    divisor: float
    brackets: List[Bracket]
    searcher: str = "adaptive_asha"
    grid: Tuple[Dict[str, Any], ...] = ()

    @classmethod
    def from_upfront(
        cls, section: Union[SearcherConfig, Dict[str, Any]], hparams: Dict[str, Any]
    ) -> "SearchSettings":
        """A ``grid``, ``random`` or ``single`` (one trial, drawn as ``random`` draws)
        searcher section, typed or as given (``hparams``: the grid's space)."""
        searcher = _typed(section)
        grid = tuple(grid_params(hparams)) if searcher.name == "grid" else ()
        if searcher.name == "single":
            max_trials = 1
        else:
            max_trials = len(grid) if grid else int(_required(searcher.max_trials))
        concurrent = searcher.max_concurrent_trials
        return cls(
            metric=searcher.metric,
            smaller_is_better=searcher.smaller_is_better,
            time_metric="batches",
            max_time=0,
            max_trials=max_trials,
            divisor=4.0,
            brackets=[Bracket(0, max_trials, min(concurrent, max_trials), ())],
            searcher=searcher.name,
            grid=grid,
        )

    @classmethod
    def from_searcher(
        cls,
        section: Union[SearcherConfig, Dict[str, Any]],
        lengths: Lengths,
        global_batch_size: Optional[int],
    ) -> "SearchSettings":
        """An ``adaptive_asha`` searcher section, typed or as given.

        Raises ``InvalidConfigException`` naming the key when the length is missing."""
        searcher = _typed(section)
        length = lengths.searcher_time or lengths.max_length
        if length is None or length.unit is None:
            raise errors.InvalidConfigException(
                "searcher: adaptive_asha needs time_metric and max_time (e.g. time_metric: "
                "batches, max_time: 1000), or max_length: {batches: 1000}."
            )
        time_metric, max_time = length.unit, length.number
        if length is lengths.max_length and length.unit == "records":
            time_metric, max_time = "batches", length.batches_of(global_batch_size)
        if time_metric not in _TIME_UNITS:
            raise errors.InvalidConfigException(
                f"searcher.time_metric: {time_metric!r} is not a length det-lightning can train "
                "a trial for; use batches or epochs."
            )
        divisor = searcher.divisor
        max_trials = int(_required(searcher.max_trials))
        return cls(
            metric=searcher.metric,
            smaller_is_better=searcher.smaller_is_better,
            time_metric=time_metric,
            max_time=int(max_time),
            max_trials=max_trials,
            divisor=divisor,
            brackets=make_brackets(
                max_time=int(max_time),
                max_trials=max_trials,
                divisor=divisor,
                mode=searcher.mode,
                max_rungs_cfg=searcher.max_rungs,
                bracket_rungs_cfg=searcher.bracket_rungs,
                max_concurrent_trials=searcher.max_concurrent_trials,
            ),
        )


def _typed(section: Union[SearcherConfig, Dict[str, Any]]) -> SearcherConfig:
    return section if isinstance(section, SearcherConfig) else SearcherConfig.from_section(section)


def _required(max_trials: Optional[int]) -> int:
    """``searcher.max_trials``, which the config's checks require for these searchers."""
    if max_trials is None:
        raise errors.InvalidConfigException("searcher.max_trials is required for this searcher.")
    return max_trials


def length_mismatch(
    fit_length: Any, searcher_length: Any, rung_units: Sequence[int], time_metric: str
) -> str:
    """The warning for a search's trial whose ``fit(max_length=...)`` is not the searcher's
    length (Determined logs one too), with what it means for ``adaptive_asha``'s rungs.

    >>> from det_lightning.pytorch import Batch
    >>> print(length_mismatch(Batch(1), Batch(8), (2, 4, 8), "batches"))  # doctest: +ELLIPSIS
    fit(max_length=Batch(value=1)) is not the searcher's length, Batch(value=8): the trial trains \
for Batch(value=1). It ends before the first rung (2 batches): adaptive_asha ranks none ...
    """
    head = (
        f"fit(max_length={fit_length!r}) is not the searcher's length, {searcher_length!r}: "
        f"the trial trains for {fit_length!r}. "
    )
    fix = (
        " Call fit(max_length=None) to train for the searcher's length, or give the searcher "
        "the script's length."
    )
    if not rung_units:
        return head + "This may result in unexpected hyperparameter search behavior." + fix
    rungs = f"{list(rung_units)} {time_metric}"
    unit = "batches" if type(fit_length).__name__ == "Batch" else "epochs"
    if unit != time_metric:
        return (
            head + f"adaptive_asha's rungs are at {rungs}, counted in {time_metric}: "
            "where this trial ends among them depends on the epoch length, and a rung it "
            "does not reach ranks nothing." + fix
        )
    reached = [r for r in rung_units if r <= fit_length.value]
    if not reached:
        return (
            head + f"It ends before the first rung ({rung_units[0]} {time_metric}): "
            "adaptive_asha ranks none of the search's trials and stops none early." + fix
        )
    if len(reached) < len(rung_units):
        missed = list(rung_units[len(reached) :])
        return (
            head + f"It reaches only the rungs at {reached} {time_metric} of {rungs}: those "
            f"at {missed} rank nothing, and no trial trains the search's full length." + fix
        )
    return (
        head + f"It trains past adaptive_asha's last rung ({rung_units[-1]} {time_metric}), "
        "which the search takes as a trial's full length." + fix
    )
