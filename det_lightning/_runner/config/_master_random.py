"""Determined's master's random stream: each trial's hyperparameters and seed, drawn from
``reproducibility.experiment_seed`` as the master drew them.

The master keeps one generator per experiment (``master/pkg/nprand``: NumPy's legacy Mersenne
Twister, seeded as ``numpy.random.RandomState(seed)`` is) and makes each trial it creates
(``searcher.NewCreate``) from three draws, in this order::

    hyperparameters   sampleAll: names in sorted order; const draws nothing, int
                      minval + Intn(maxval - minval + 1), double Uniform(minval, maxval), log
                      base ** Uniform(minval, maxval), categorical vals[Intn(len(vals))]
                      (single and random draw them; a grid's point is given)
    request id        16 bytes: four 32-bit words
    trial seed        Int64n(2 ** 31): $DET_TRIAL_SEED, which seeds the trial's generators

So the k-th trial a ``single``, ``random`` or ``grid`` search creates takes the k-th of these
draws, however the trials' timing falls. The master's own records agree
(``master/test/olddata/pre_remove_steps.sql``: the trial seeds and request ids of five
experiments; ``tests/unit/test_master_random.py``).

Two limits: the master walks a nested hyperparameter's members in Go's map order, which
changes from run to run (here: sorted, as at the top level), and Go's ``math.Pow`` may round a
``log`` value's last bit differently from C's ``pow``.
"""

import secrets
import uuid

import numpy as np

from det_lightning.pytorch._seeds import MAX_EXPERIMENT_SEED

TRIAL_SEED_BOUND = 1 << 31  # a trial seed is below it (the master's Int64n(1 << 31))


class MasterRandom:
    """One experiment's generator, as the master's ``nprand.State``.

    >>> rng = MasterRandom(42)
    >>> [rng.below(10) for _ in range(8)]  # nprand_test.go: RandomState(42).randint(0, 10)
    [6, 3, 7, 4, 6, 9, 2, 6]
    """

    def __init__(self, seed: int) -> None:
        seeded = np.random.RandomState(seed).get_state(legacy=False)  # init_genrand(seed)
        self._words = np.random.MT19937()
        self._words.state = {"bit_generator": "MT19937", "state": seeded["state"]}

    @classmethod
    def unseeded(cls) -> "MasterRandom":
        """A generator from system randomness (no experiment seed given)."""
        return cls(secrets.randbits(32))

    def word(self) -> int:
        """32 random bits (``Bits32``)."""
        return int(self._words.random_raw())

    def below(self, n: int) -> int:
        """An int in ``[0, n)`` (``Intn``, ``Int64n``): bits above ``n - 1`` masked off, drawn
        again until at most ``n - 1``; 32 bits a draw while ``n - 1`` fits in them, else 64."""
        limit = n - 1
        if limit <= 0:
            return 0
        mask = (1 << limit.bit_length()) - 1
        while True:
            if limit <= 0xFFFFFFFF:
                value = self.word() & mask
            else:
                value = ((self.word() << 32) | self.word()) & mask
            if value <= limit:
                return value

    def uniform(self, low: float, high: float) -> float:
        """A float in ``[low, high)`` (``Uniform``: 53 bits from two words)."""
        a, b = self.word() >> 5, self.word() >> 6
        return low + (high - low) * ((a * 67108864.0 + b) / 9007199254740992.0)

    def request_id(self) -> str:
        """Draws a trial's request id (which det-lightning does not use): a version 4 UUID
        from 16 bytes, each word's low byte first (``model.NewRequestID``)."""
        raw = bytearray(b"".join(self.word().to_bytes(4, "little") for _ in range(4)))
        raw[6] = (raw[6] & 0x0F) | 0x40
        raw[8] = (raw[8] & 0x3F) | 0x80
        return str(uuid.UUID(bytes=bytes(raw)))

    def trial_seed(self) -> int:
        """Draws a trial's seed."""
        return self.below(TRIAL_SEED_BOUND)


__all__ = ["MAX_EXPERIMENT_SEED", "TRIAL_SEED_BOUND", "MasterRandom"]
