"""Where the training data stands in a checkpoint: what a resumed run needs to continue the
same batch order, saved in ``state_dict.pth`` under ``_checkpoint.EXTRA`` (Determined ignores
the key).

Written by ``adapters/checkpoints.py`` at each checkpoint, read by ``adapters/resume.py`` and
``adapters/fit.py`` when a run resumes; this module is the one place that knows its layout::

    {"det_lightning": {"format": 1, "data": {"base_seed": ..., "pass_states": {pass: state},
                                             "pass_starts": {pass: first stream index}}}}
"""

import dataclasses
from typing import Any, Dict, Mapping, Optional

from det_lightning.pytorch._checkpoint import EXTRA

FORMAT = 1


@dataclasses.dataclass(frozen=True)
class DataPosition:
    """The data order's state at a checkpoint.

    Attributes:
        base_seed: with several processes, the seed each pass's shuffle is derived from (the
            chief's initial torch seed); None with one process, whose passes draw from the
            global generator as Determined's do.
        pass_states: the shuffle state of each pass a resume still needs (the sampler's
            ``state()``); None when the loader has no resumable sampler.
        pass_starts: where each of those passes began in the batch stream (``starts()``).

    >>> position = DataPosition(base_seed=7, pass_states={1: "s"}, pass_starts={1: 40})
    >>> DataPosition.from_state({EXTRA: position.saved()}) == position
    True
    >>> DataPosition.from_state(None)
    DataPosition(base_seed=None, pass_states=None, pass_starts=None)
    """

    base_seed: Optional[int] = None
    pass_states: Optional[Dict[int, Any]] = None
    pass_starts: Optional[Dict[int, int]] = None

    def saved(self) -> Dict[str, Any]:
        """The value stored under ``EXTRA``."""
        data: Dict[str, Any] = {"base_seed": self.base_seed}
        if self.pass_states is not None:
            data["pass_states"] = self.pass_states
        if self.pass_starts is not None:
            data["pass_starts"] = self.pass_starts
        return {"format": FORMAT, "data": data}

    @classmethod
    def from_state(cls, state: Optional[Mapping[str, Any]]) -> "DataPosition":
        """The position saved in a checkpoint's ``state_dict.pth`` (``state``), or the empty
        one (a checkpoint of the real Determined, or none)."""
        data = ((state or {}).get(EXTRA) or {}).get("data") or {}
        seed = data.get("base_seed")
        return cls(
            base_seed=None if seed is None else int(seed),
            pass_states=data.get("pass_states"),
            pass_starts=data.get("pass_starts"),
        )


__all__ = ["DataPosition"]
