"""torchrun, quiet when a signal stops it: ``python -m det_lightning._runner._torchrun ARGS``.

``det-lightning run --devices N`` and an experiment's N-process trial start their processes
with torchrun. On Ctrl-C or SIGTERM torchrun passes the signal to its processes, waits for them
(they checkpoint and stop, each saying so once), then raises ``SignalException`` with a
40-line traceback that says nothing the user needs. This runs torchrun's own ``main`` and
exits with ``128 + signal`` instead; every other outcome is torchrun's.
"""

import sys
from typing import List, Optional, Sequence

STANDALONE = ("--standalone",)  # one machine: a rendezvous on a free port of its own


def command(devices: int, rendezvous: Sequence[str], module: str, args: Sequence[str]) -> List[str]:
    """``python -m MODULE ARGS`` on ``devices`` processes of this machine, under this quiet
    torchrun (``rendezvous``: ``STANDALONE``, or the flags that meet several nodes).

    >>> command(2, STANDALONE, "det_lightning", ["run", "t.py"])[1:]
    ... # doctest: +NORMALIZE_WHITESPACE
    ['-m', 'det_lightning._runner._torchrun', '--nproc-per-node=2', '--standalone',
     '-m', 'det_lightning', 'run', 't.py']
    """
    head = [sys.executable, "-m", "det_lightning._runner._torchrun"]
    return [*head, f"--nproc-per-node={devices}", *rendezvous, "-m", module, *args]


def main(argv: Optional[List[str]] = None) -> int:
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException

    try:
        run.main(sys.argv[1:] if argv is None else argv)
    except SignalException as stopped:
        return 128 + int(stopped.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
