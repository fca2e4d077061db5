"""The ``resources`` and ``optimizations`` sections, typed: built once from the validated config,
their defaults here (Determined's, and ours for ``precision``)::

    resources.slots_per_trial            1 (0: a CPU-only trial)
    optimizations.aggregation_frequency  1
    optimizations.precision              None (ours: Lightning's default precision)

The runner reads them through ``ExperimentConfig.resources_config`` and
``ExperimentConfig.optimizations_config`` and nowhere by key
(``tests/unit/test_config_sections.py`` checks that).
"""

import dataclasses
from typing import Any, Mapping, Optional


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourcesConfig:
    """A validated ``resources`` section (``_schema._RESOURCES`` checked its keys and types).

    >>> ResourcesConfig.from_section({"slots_per_trial": 2}), ResourcesConfig.from_section({})
    (ResourcesConfig(slots_per_trial=2), ResourcesConfig(slots_per_trial=1))
    """

    slots_per_trial: int = 1

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "ResourcesConfig":
        """The typed section; a key left out, or null, takes its default."""
        slots = section.get("slots_per_trial")
        return cls(slots_per_trial=cls.slots_per_trial if slots is None else int(slots))


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizationsConfig:
    """A validated ``optimizations`` section (``_schema._OPTIMIZATIONS`` checked it).

    >>> OptimizationsConfig.from_section({"aggregation_frequency": 4, "precision": "bf16-mixed"})
    OptimizationsConfig(aggregation_frequency=4, precision='bf16-mixed')
    >>> OptimizationsConfig.from_section({}) == OptimizationsConfig()
    True
    """

    aggregation_frequency: int = 1
    precision: Optional[str] = None  # Lightning's precision for every trial

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "OptimizationsConfig":
        """The typed section; a key left out, or null, takes its default."""
        frequency, precision = section.get("aggregation_frequency"), section.get("precision")
        return cls(
            aggregation_frequency=(
                cls.aggregation_frequency if frequency is None else int(frequency)
            ),
            precision=None if precision is None else str(precision),
        )


__all__ = ["OptimizationsConfig", "ResourcesConfig"]
