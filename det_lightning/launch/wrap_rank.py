"""``python -m determined.launch.wrap_rank RANK [--] COMMAND...``: runs a worker, each line of
its output prefixed with ``[rank=RANK] ``.

Determined's launcher-style scripts (``examples/tutorials/core_api/4_distributed.py``) start
one worker per slot through it so that the logs of several workers can be told apart. ``RANK``
is a number, or a comma-separated list of environment variables tried in order (``RANK`` or
``OMPI_COMM_WORLD_RANK,PMI_RANK``). Lines end at ``\\n`` or ``\\r`` (a progress bar's updates
are lines of their own) and at 8 KiB; the signals this process receives go to the worker; the
exit status is the worker's. ``--no-redirect-stdio`` is accepted: there is no container log to
redirect to, so output always goes to this process's stdout and stderr.
"""

import argparse
import io
import os
import re
import subprocess
import sys
import threading
from typing import BinaryIO, Iterator, List, Mapping, Optional

from det_lightning._refused import module_getattr

# Determined's helpers (read_newlines_or_carriage_returns, ...) raise NotProvidedError.
__getattr__ = module_getattr(__name__)

_LINE_END = re.compile(rb"[\r\n]")
_LIMIT = io.DEFAULT_BUFFER_SIZE - 1  # a line's bytes before its newline, at most


def lines_of(stream: BinaryIO) -> Iterator[bytes]:
    r"""The lines of ``stream`` (unbuffered), each ending with one ``\n``: a line ends at
    ``\n`` or ``\r`` (``\r\n`` gives an empty line after, as Determined's), at ``_LIMIT``
    bytes, or at the end.

    >>> list(lines_of(io.BytesIO(b"a\rb\n\nc")))
    [b'a\n', b'b\n', b'\n', b'c\n']
    """
    pending = b""
    while True:
        chunk = stream.read(_LIMIT - len(pending))
        if not chunk:
            break
        pending += chunk
        while True:
            end = _LINE_END.search(pending)
            if end is None:
                break
            yield pending[: end.start()] + b"\n"
            pending = pending[end.end() :]
        if len(pending) >= _LIMIT:
            yield pending + b"\n"
            pending = b""
    if pending:
        yield pending + b"\n"


def _die_with_this_process() -> None:
    """In the worker before it runs: SIGKILL when wrap_rank dies (it is in no group a
    signal to the trial reaches, so this is how a killed trial takes it along)."""
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _forward(source: BinaryIO, fd: int, prefix: bytes) -> None:
    for line in lines_of(source):
        os.write(fd, prefix + line)


def rank_of(given: str, environ: Mapping[str, str]) -> Optional[int]:
    """``given`` as a rank: a number, or the first of its comma-separated variables set.

    >>> rank_of("3", {}), rank_of("OMPI_COMM_WORLD_RANK,RANK", {"RANK": "2"}), rank_of("X", {})
    (3, 2, None)
    """
    if given.isdigit():
        return int(given)
    for name in given.split(","):
        if name in environ:
            return int(environ[name])
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m determined.launch.wrap_rank",
        usage="%(prog)s [-h] [--no-redirect-stdio] RANK COMMAND...",
        description="Runs COMMAND with each line of its output prefixed with [rank=RANK].",
    )
    parser.add_argument("--no-redirect-stdio", action="store_true", help="accepted; no effect")
    parser.add_argument(
        "rank",
        metavar="RANK",
        help="a number, or comma-separated environment variables tried in order",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND...")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    from det_lightning.util import forward_signals

    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("COMMAND is missing: wrap_rank RANK [--] python3 worker.py ...")
    rank = rank_of(args.rank, os.environ)
    if rank is None:
        print(
            f"wrap_rank: none of the environment variables {args.rank!r} is set; give the "
            "rank as a number or name a variable that holds it.",
            file=sys.stderr,
        )
        return 1
    try:
        # A session of its own: a signal to the trial's process group reaches the worker
        # once, through forward_signals, not twice (Determined's container signals only this
        # process).
        worker = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            start_new_session=True,
            preexec_fn=_die_with_this_process,
        )
    except OSError as e:
        print(f"wrap_rank: cannot start {command[0]!r}: {e.strerror}.", file=sys.stderr)
        return 127
    assert worker.stdout is not None and worker.stderr is not None
    prefix = f"[rank={rank}] ".encode()
    with forward_signals(worker):
        copies = [
            threading.Thread(target=_forward, args=(worker.stdout, sys.stdout.fileno(), prefix)),
            threading.Thread(target=_forward, args=(worker.stderr, sys.stderr.fileno(), prefix)),
        ]
        for copy in copies:
            copy.start()
        for copy in copies:
            copy.join()
        return worker.wait()


if __name__ == "__main__":
    sys.exit(main())
