"""``SearchSettings``: a ``grid``, ``random`` or ``adaptive_asha`` searcher section, read as
Determined 0.38 reads it.

Every searcher is a list of brackets, each one Optuna study: ``adaptive_asha`` has Determined's
brackets; ``grid`` and ``random`` have one bracket without rungs (a trial trains its full
length), holding ``max_trials`` trials, or the grid's points.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from det_lightning import errors
from det_lightning._search._asha import Bracket, make_brackets

_TIME_UNITS = ("batches", "epochs")


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
    def from_upfront(cls, searcher: Dict[str, Any], hparams: Dict[str, Any]) -> "SearchSettings":
        """A ``grid`` or ``random`` searcher section (``hparams``: the grid's space)."""
        from det_lightning._search._grid import grid_params

        grid = tuple(grid_params(hparams)) if searcher["name"] == "grid" else ()
        max_trials = len(grid) if grid else int(searcher["max_trials"])
        concurrent = int(searcher.get("max_concurrent_trials") or 16)
        return cls(
            metric=searcher["metric"],
            smaller_is_better=bool(searcher.get("smaller_is_better", True)),
            time_metric="batches", max_time=0, max_trials=max_trials, divisor=4.0,
            brackets=[Bracket(0, max_trials, min(concurrent, max_trials), ())],
            searcher=searcher["name"], grid=grid,
        )

    @classmethod
    def from_searcher(cls, searcher: Dict[str, Any], global_batch_size: Optional[int]
                      ) -> "SearchSettings":
        """Raises ``InvalidConfigException`` naming the key when the length is missing."""
        time_metric, max_time = searcher.get("time_metric"), searcher.get("max_time")
        if time_metric is None or max_time is None:
            length = searcher.get("max_length")
            if not isinstance(length, dict):
                raise errors.InvalidConfigException(
                    "searcher: adaptive_asha needs time_metric and max_time (e.g. time_metric: "
                    "batches, max_time: 1000), or max_length: {batches: 1000}."
                )
            (unit, number), = length.items()
            if unit == "records":
                if not global_batch_size:
                    raise errors.InvalidConfigException(
                        "searcher.max_length.records: converting records to batches needs "
                        "hyperparameters.global_batch_size; give max_length in batches instead."
                    )
                unit, number = "batches", max(int(number) // int(global_batch_size), 1)
            time_metric, max_time = unit, int(number)
        if time_metric not in _TIME_UNITS:
            raise errors.InvalidConfigException(
                f"searcher.time_metric: {time_metric!r} is not a length det-lightning can train "
                "a trial for; use batches or epochs."
            )
        divisor = float(searcher.get("divisor") or 4.0)
        max_trials = int(searcher["max_trials"])
        return cls(
            metric=searcher["metric"],
            smaller_is_better=bool(searcher.get("smaller_is_better", True)),
            time_metric=time_metric,
            max_time=int(max_time),
            max_trials=max_trials,
            divisor=divisor,
            brackets=make_brackets(
                max_time=int(max_time), max_trials=max_trials, divisor=divisor,
                mode=searcher.get("mode") or "standard",
                max_rungs_cfg=int(searcher.get("max_rungs") or 5),
                bracket_rungs_cfg=searcher.get("bracket_rungs"),
                max_concurrent_trials=int(searcher.get("max_concurrent_trials") or 16),
            ),
        )
