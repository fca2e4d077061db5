"""Training lengths and periods, read from the experiment config once (``Lengths``).

Determined's keys, and what ``Trainer.fit()`` gets from them, as Determined 0.38's harness
passes them::

    searcher.max_length: {batches|epochs|records: n}   fit(max_length=...)           n >= 1
        a bare integer (no unit): only for a command entrypoint, whose script picks the unit
    searcher.time_metric + searcher.max_time             the searcher's length: adaptive_asha's,
                                                         and fit()'s in a search's trial that
                                                         gives none (else max_length)
    min_validation_period: {unit: n}                     fit(validation_period=...)  0: never
    min_checkpoint_period: {unit: n}                     fit(checkpoint_period=...)  0: never
    scheduling_unit: n                                   fit(reporting_period=Batch(n))
    records_per_epoch: n                                 not needed (0: unset): an epoch is one
                                                         pass of the training data loader

Records become batches with the trial's ``hyperparameters.global_batch_size``, an integer >= 1
(at least one batch); without one a length in records is an error, as in Determined
(``TrainUnit._from_searcher_unit``). "Never" is ``Batch(sys.maxsize)``.

>>> lengths = Lengths.from_config({
...     "searcher": {"max_length": {"records": 100}}, "min_validation_period": {"epochs": 2},
...     "min_checkpoint_period": {"batches": 0}, "scheduling_unit": 7})
>>> for name, unit in lengths.fit_lengths({"global_batch_size": 8}).items():
...     print(name, unit)
max_length Batch(value=12)
validation_period Epoch(value=2)
checkpoint_period Batch(value=9223372036854775807)
reporting_period Batch(value=7)
"""

import dataclasses
import sys
from typing import Any, Dict, Mapping, Optional

from det_lightning.errors import InvalidConfigException
from det_lightning.pytorch._units import Batch, Epoch, TrainUnit

NEVER = Batch(sys.maxsize)  # a period of 0
_EXAMPLE = "e.g. max_length: {batches: 1000} (or epochs, or records)"


@dataclasses.dataclass(frozen=True)
class Length:
    """``{unit: number}`` as the config writes it at ``path``.

    Attributes:
        path: the config key, for messages (``searcher.max_length``).
        number: the count; 0 (periods only) means never.
        unit: ``batches``, ``epochs`` or ``records``; None for ``max_length``'s bare integer.
    """

    path: str
    number: int
    unit: Optional[str]

    @classmethod
    def parse(cls, path: str, value: Any) -> Optional["Length"]:
        """``{unit: n}`` or a bare integer as a ``Length``; None when the key is absent.

        >>> Length.parse("searcher.max_length", {"epochs": 3})
        Length(path='searcher.max_length', number=3, unit='epochs')
        >>> Length.parse("searcher.max_length", 4).unit is None
        True
        """
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(path, value, None)
        ((unit, number),) = value.items()
        return cls(path, int(number), str(unit))

    def batches_of(self, global_batch_size: Any) -> int:
        """``number`` records in batches of ``global_batch_size``, at least one.

        Raises:
            InvalidConfigException: ``global_batch_size`` is not an integer >= 1.
        """
        size = global_batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidConfigException(
                f"{self.path}.records: converting records to batches needs an integer "
                f"hyperparameters.global_batch_size >= 1, got {size!r}. Set it, or give "
                f"{self.path} in batches."
            )
        return max(self.number // size, 1)

    def train_unit(self, global_batch_size: Any = None) -> TrainUnit:
        """As ``fit()`` takes it: ``Batch`` or ``Epoch``, records converted; 0 is never.

        Raises:
            InvalidConfigException: a length in records without a ``global_batch_size``, or a
                bare integer (no unit).
        """
        if self.number < 1:
            return NEVER
        if self.unit == "batches":
            return Batch(self.number)
        if self.unit == "epochs":  # one pass of the training loader, as in Determined 0.38
            return Epoch(self.number)
        if self.unit == "records":
            return Batch(self.batches_of(global_batch_size))
        raise InvalidConfigException(
            f"{self.path}: {self.number!r} has no unit, which only a command entrypoint (the "
            f"script picks the unit) can use; a 'model_def:TrialClass' entrypoint needs "
            f"{_EXAMPLE}."
        )


@dataclasses.dataclass(frozen=True)
class Lengths:
    """Every length and period of an experiment config, parsed once (see the module notes).

    Attributes:
        max_length: ``searcher.max_length``, None when absent.
        searcher_time: ``searcher.max_time`` in ``searcher.time_metric``, None when unset.
        validation_period: ``min_validation_period`` (0: never).
        checkpoint_period: ``min_checkpoint_period`` (0: never).
        scheduling_unit: batches per training-metrics report.
        records_per_epoch: None when unset (0).
    """

    max_length: Optional[Length]
    searcher_time: Optional[Length]
    validation_period: Length
    checkpoint_period: Length
    scheduling_unit: int = 100
    records_per_epoch: Optional[int] = None

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> "Lengths":
        """From a validated config dict (Determined's defaults for what it lacks)."""
        searcher = raw.get("searcher") or {}
        metric, max_time = searcher.get("time_metric"), searcher.get("max_time")
        time = None
        if metric is not None and max_time is not None:
            time = Length("searcher.max_time", int(max_time), str(metric))
        never = {"batches": 0}
        return cls(
            max_length=Length.parse("searcher.max_length", searcher.get("max_length")),
            searcher_time=time,
            validation_period=_period(raw, "min_validation_period", never),
            checkpoint_period=_period(raw, "min_checkpoint_period", never),
            scheduling_unit=int(raw.get("scheduling_unit") or 100),
            records_per_epoch=int(raw.get("records_per_epoch") or 0) or None,
        )

    def fit_periods(self, hparams: Mapping[str, Any]) -> Dict[str, TrainUnit]:
        """``fit()``'s periods, each in its own unit (records converted to batches).

        Raises:
            InvalidConfigException: a period in records has no ``global_batch_size``.
        """
        size = hparams.get("global_batch_size")
        return {
            "validation_period": self.validation_period.train_unit(size),
            "checkpoint_period": self.checkpoint_period.train_unit(size),
            "reporting_period": Batch(self.scheduling_unit),
        }

    def fit_lengths(self, hparams: Mapping[str, Any]) -> Dict[str, TrainUnit]:
        """``fit()``'s length and periods for a ``model_def:Trial`` trial, as Determined's
        harness derives them.

        Raises:
            InvalidConfigException: ``searcher.max_length`` is missing or has no unit, or a
                length in records has no ``global_batch_size`` to convert with.
        """
        if self.max_length is None:
            raise InvalidConfigException(
                f"searcher.max_length: required key is missing: a 'model_def:TrialClass' "
                f"entrypoint trains each trial for searcher.max_length; {_EXAMPLE}."
            )
        max_length = self.max_length.train_unit(hparams.get("global_batch_size"))
        return {"max_length": max_length, **self.fit_periods(hparams)}

    def searcher_length(self, hparams: Mapping[str, Any]) -> Optional[TrainUnit]:
        """The length a search gives its trial when ``fit()`` has none: ``max_time`` in
        ``time_metric``, else ``max_length``; None without either, or for a bare integer.

        Raises:
            InvalidConfigException: a length in records has no ``global_batch_size`` (the real
                Determined raises too).
        """
        length = self.searcher_time or self.max_length
        if length is None or length.unit is None:
            return None
        return length.train_unit(hparams.get("global_batch_size"))


def _period(raw: Mapping[str, Any], key: str, default: Dict[str, int]) -> Length:
    period = Length.parse(key, raw.get(key) or default)
    assert period is not None
    return period


__all__ = ["Length", "Lengths", "NEVER"]
