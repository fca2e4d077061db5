"""Starting ``train.py`` in its own process and waiting on it, with bounded waits."""

import json
import os
import pathlib
import subprocess
import sys
import threading
import time
from typing import Any, List

from tests.fixtures import warm

SCRIPT = pathlib.Path(__file__).with_name("train.py")
TIMEOUT_S = 180  # a loaded CI machine imports torch and Lightning slowly


class Script:
    """``train.py`` running with ``args`` (written to a file under ``where``).

    Its output is read through pipes by threads (not redirected to files: a file-size limit
    the script sets on itself would cut its own log short).
    """

    def __init__(self, where: pathlib.Path, new_session: bool = False, **args: Any) -> None:
        where.mkdir(parents=True, exist_ok=True)
        args_file = where / "args.json"
        args_file.write_text(json.dumps(args))
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.process = warm.Popen(  # forked from the warm launcher (tests/fixtures/warm.py)
            [sys.executable, str(SCRIPT), str(args_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=new_session,  # its own process group, to signal as a whole
        )
        self._output: List[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self._output.append(line)

    def wait(self, timeout: float = TIMEOUT_S) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"train.py did not finish in {timeout} s:\n{self.log()}") from None

    def wait_for_file(self, path: pathlib.Path, timeout: float = TIMEOUT_S) -> None:
        self._wait_until(path.exists, path.name, timeout)

    def wait_for_output(self, text: str, timeout: float = TIMEOUT_S) -> None:
        """Until the script has printed ``text`` (a log line it writes at an event)."""
        self._wait_until(
            lambda: text in b"".join(self._output).decode(errors="replace"), repr(text), timeout
        )

    def _wait_until(self, condition: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"train.py exited ({self.process.returncode}) before {what} appeared:\n"
                    f"{self.log()}"
                )
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"{what} did not appear in {timeout} s:\n{self.log()}")
            time.sleep(0.02)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def log(self) -> str:
        if self.process.poll() is not None:
            self._reader.join(timeout=10)
        return b"".join(self._output).decode(errors="replace")
