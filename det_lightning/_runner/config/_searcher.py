"""The ``searcher`` section, typed: built once from the validated config, its defaults here.

The runner reads the searcher through ``ExperimentConfig.searcher_config`` and nowhere by key
(``tests/unit/test_config_types.py`` checks that), so a default is stated once::

    smaller_is_better       True
    max_concurrent_trials   16 (also when 0 or unset, as Determined's master treats it locally)
    divisor                 4.0  (adaptive_asha)
    mode                    "standard"
    max_rungs               5
"""

import dataclasses
from typing import Any, Mapping, Optional, Tuple

DEFAULT_MAX_CONCURRENT_TRIALS = 16


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearcherConfig:
    """A validated ``searcher`` section (``_schema._SEARCHER`` checked its keys and types).

    >>> s = SearcherConfig.from_section({"name": "single", "metric": "loss"})
    >>> s.smaller_is_better, s.max_concurrent_trials, s.divisor, s.mode, s.max_rungs
    (True, 16, 4.0, 'standard', 5)
    >>> SearcherConfig.from_section(
    ...     {"name": "adaptive_asha", "metric": "acc", "smaller_is_better": False,
    ...      "max_trials": 8, "max_concurrent_trials": 0, "bracket_rungs": [3, 2]}
    ... ).bracket_rungs
    (3, 2)
    """

    name: str
    metric: str
    smaller_is_better: bool = True
    max_trials: Optional[int] = None
    max_concurrent_trials: int = DEFAULT_MAX_CONCURRENT_TRIALS
    divisor: float = 4.0
    mode: str = "standard"
    max_rungs: int = 5
    bracket_rungs: Optional[Tuple[int, ...]] = None

    @classmethod
    def from_experiment(cls, config: Mapping[str, Any]) -> "SearcherConfig":
        """The typed ``searcher`` section of a validated experiment config (as a run record
        keeps it)."""
        return cls.from_section(config["searcher"])

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "SearcherConfig":
        """The typed section; a key left out, or null, takes its default."""

        def given(key: str) -> Any:
            return section.get(key)

        rungs = given("bracket_rungs")
        return cls(
            name=str(section["name"]),
            metric=str(section["metric"]),
            smaller_is_better=bool(
                True if given("smaller_is_better") is None else given("smaller_is_better")
            ),
            max_trials=None if given("max_trials") is None else int(given("max_trials")),
            max_concurrent_trials=int(
                given("max_concurrent_trials") or DEFAULT_MAX_CONCURRENT_TRIALS
            ),
            divisor=float(given("divisor") or 4.0),
            mode=str(given("mode") or "standard"),
            max_rungs=int(given("max_rungs") or 5),
            bracket_rungs=tuple(int(r) for r in rungs) if rungs else None,
        )


__all__ = ["DEFAULT_MAX_CONCURRENT_TRIALS", "SearcherConfig"]
