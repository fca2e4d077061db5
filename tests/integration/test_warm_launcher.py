"""The tests' warm launcher (``tests/fixtures/warm.py``): a forked child is what ``python
ARGS`` would be, and falls back to a new interpreter where it could differ."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import List

import pytest

from tests.fixtures import warm, warm_client

pytestmark = pytest.mark.slow

DESCRIBE = """
import json, os, signal, sys
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "name": __name__, "path0": sys.path[0],
    "env": dict(os.environ), "warm": "torch" in sys.modules, "stdin": sys.stdin.read(),
    "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "session": os.getsid(0) == os.getpid(),
}))
"""


def _environment() -> dict:
    """This process's environment less one variable, plus one."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    return {**env, "ONLY": "this"}


def _describe(*args: str, cwd: pathlib.Path, **kwargs: object) -> dict:
    result = warm.run(
        [sys.executable, *args],
        cwd=cwd,
        env=kwargs.pop("env", _environment()),
        input="from stdin",
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )
    assert result.returncode == 0, result.stderr
    described: dict = json.loads(result.stdout)
    return described


def test_a_warm_child_starts_as_python_would(isolated_run: pathlib.Path) -> None:
    script = isolated_run / "describe.py"
    script.write_text(DESCRIBE)
    seen = _describe(str(script), "a", "--b", cwd=isolated_run, start_new_session=True)
    assert seen["warm"], "forked from the server, torch is already imported"
    assert seen["argv"] == [str(script), "a", "--b"] and seen["name"] == "__main__"
    assert seen["cwd"] == str(isolated_run) and seen["path0"] == str(isolated_run)
    assert seen["env"] == _environment(), "the environment replaced wholesale"
    # Python's own SIGINT handler, unless this run ignores SIGINT (a background job of a shell
    # without job control does): then the child inherits SIG_IGN, as across exec.
    ignoring_sigint = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert seen["stdin"] == "from stdin" and seen["sigint"] != ignoring_sigint and seen["sigterm"]
    assert seen["fds"][:3] == [0, 1, 2] and len(seen["fds"]) == 4  # and the listing's own
    assert seen["session"]
    code = _describe("-c", DESCRIBE, "x", cwd=isolated_run)
    assert code["argv"] == ["-c", "x"] and code["path0"] == "" and not code["session"]


IGNORED = """
import json, signal, sys
print(json.dumps({"warm": "torch" in sys.modules, "ignored": [
    int(s) for s in signal.valid_signals() if signal.getsignal(s) == signal.SIG_IGN
]}))
"""


def test_a_warm_child_ignores_what_a_new_interpreter_would(isolated_run: pathlib.Path) -> None:
    """An ignored signal stays ignored across exec: a warm child ignores what its caller ignores
    (a test run under ``nohup``, or in a background job, ignores SIGHUP or SIGINT), as a new
    interpreter started from the same caller does; the rest are at Python's start-up's."""

    def both() -> "tuple[dict, dict]":
        kwargs: dict = {"cwd": isolated_run, "capture_output": True, "text": True, "timeout": 300}
        warm_child = warm.run([sys.executable, "-c", IGNORED], **kwargs)
        new = subprocess.run([sys.executable, "-c", IGNORED], **kwargs)
        assert warm_child.returncode == new.returncode == 0, warm_child.stderr + new.stderr
        return json.loads(warm_child.stdout), json.loads(new.stdout)

    as_called = both()
    assert as_called[0]["warm"] and not as_called[1]["warm"]
    assert as_called[0]["ignored"] == as_called[1]["ignored"]
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGHUP, signal.SIGQUIT)}
    try:
        ignoring = both()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert ignoring[0]["warm"]
    assert ignoring[0]["ignored"] == ignoring[1]["ignored"]
    assert {signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE} <= set(ignoring[0]["ignored"])


def test_exit_statuses_and_tracebacks_are_the_interpreters(isolated_run: pathlib.Path) -> None:
    def run(code: str) -> subprocess.CompletedProcess:
        return warm.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)

    raised = run("raise ValueError('boom')")
    assert raised.returncode == 1
    assert raised.stderr.splitlines() == [  # no frame of the launcher's, as in a new interpreter
        "Traceback (most recent call last):",
        '  File "<string>", line 1, in <module>',
        "ValueError: boom",
    ], raised.stderr
    said = run("import sys; sys.exit('a message')")
    assert (said.returncode, said.stderr) == (1, "a message\n")
    assert run("import sys; sys.exit(3)").returncode == 3
    assert run("raise KeyboardInterrupt").returncode == -signal.SIGINT
    assert run("import os; os._exit(7)").returncode == 7


def test_a_signal_to_a_warm_childs_group_ends_it(isolated_run: pathlib.Path) -> None:
    child = warm.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert child.stdout is not None and child.stdout.readline() == b"up\n"
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.01)
    os.killpg(child.pid, signal.SIGTERM)
    assert child.wait(60) == -signal.SIGTERM
    child.stdout.close()


SIGNALS_ITS_CHILD_AT_ONCE = """
import signal, subprocess, sys
for signum in (signal.SIGINT, signal.SIGTERM):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    child.send_signal(signum)
    print(child.wait(60), flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_warm_child_signaled_as_it_starts_ends_as_a_new_one_would(
    isolated_run: pathlib.Path, signum: int
) -> None:
    """A signal sent the moment a child is started, while it may still be becoming the child
    (a search stopped as it starts a trial): it ends the child, as it ends a new interpreter,
    never dropped by the servers that ignore it (the child would sleep 300 s); for what a warm
    child starts too."""
    child = warm.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    child.send_signal(signum)
    assert child.wait(60) == -signum
    if signum == signal.SIGTERM:
        result = warm.run(
            [sys.executable, "-c", SIGNALS_ITS_CHILD_AT_ONCE],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.stdout.split() == ["-2", "-15"], result.stdout + result.stderr


# A SIGINT that comes while a warm child forks (its descendants' server, a search worker's
# template): sent from an after-fork callback, it is handled in the next one, inside
# ``os.fork()``, where Python prints a handler's KeyboardInterrupt and drops it.
SIGNALED_INSIDE_FORK = """
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from tests.fixtures import zygote

def noop():  # a Python call: where the interpreter runs the pending handler
    pass

os.register_at_fork(after_in_parent=lambda: (os.kill(os.getpid(), signal.SIGINT), noop()))
signal.signal(signal.SIGINT, signal.default_int_handler)  # a new interpreter's
try:
    if sys.argv[2] == "serve_descendants":
        zygote.serve_descendants({})
    elif zygote._fork_flushed() == 0:  # the forked child: only its parent was signaled
        os._exit(0)
    time.sleep(30)
    print("slept on", flush=True)
except KeyboardInterrupt:
    print("interrupted", signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
"""


@pytest.mark.parametrize("fork", ["serve_descendants", "_fork_flushed"])
def test_a_sigint_that_comes_inside_the_fork_is_not_dropped(
    isolated_run: pathlib.Path, fork: str
) -> None:
    """The race that once turned a CI run red: the signaled-at-start test's child slept on."""
    root = str(pathlib.Path(__file__).resolve().parents[2])
    result = subprocess.run(
        [sys.executable, "-c", SIGNALED_INSIDE_FORK, root, fork],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.split()[:2] == ["interrupted", "True"], result.stdout + result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr


SEES_SIGINT = """
import signal
def test_sigint():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
"""


def test_a_suite_started_with_sigint_ignored_handles_it(tmp_path: pathlib.Path) -> None:
    """A suite a script starts in the background inherits SIGINT ignored; the tests' conftest
    gives it Python's handler, so the tests of what a SIGINT does see one."""
    (tmp_path / "test_sees.py").write_text(SEES_SIGINT)
    root = pathlib.Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            str(tmp_path / "test_sees.py"),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # a new interpreter
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 passed" in result.stdout


# What a process started by a warm child sees (argument 1: its starter's process group). Left
# out of its environment: what tells it apart, and what importing Lightning sets in a new
# interpreter (a forked one's environment is exactly what it was given).
GRANDCHILD = """
import json, os, sys
SET_BY_IMPORTS = {"DET_LIGHTNING_TEST_WARM", "PYTORCH_NVML_BASED_CUDA_CHECK",
                  "TORCHINDUCTOR_CACHE_DIR"}
warm = "torch" in sys.modules
from lightning.fabric.utilities.rank_zero import rank_zero_only
from torchmetrics.utilities.prints import rank_zero_only as metrics_rank_zero_only
print(json.dumps({
    "warm": warm, "argv": sys.argv, "cwd": os.getcwd(), "name": __name__,
    "env": {k: v for k, v in os.environ.items() if k not in SET_BY_IMPORTS},
    "in_starters_group": os.getpgrp() == int(sys.argv[1]), "session": os.getsid(0),
    "rank": rank_zero_only.rank, "metrics_rank": metrics_rank_zero_only.rank,
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")), "stdin": sys.stdin.read(),
}))
"""

# A warm child starting processes of its own with subprocess, as torchrun, Lightning's DDP
# launcher and ``--workers`` do: the same one forked warm and as a new interpreter
# (DET_LIGHTNING_TEST_WARM=0 in its environment), then a sleeper in a session of its own.
STARTER = """
import json, os, signal, subprocess, sys
def run(**env):
    result = subprocess.run(
        [sys.executable, "-c", sys.argv[1], str(os.getpgrp())], input="in",
        capture_output=True, text=True, env={**os.environ, **env}, cwd="/",
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
ranks = {"RANK": "1", "LOCAL_RANK": "1"}
seen = {"warm": run(**ranks), "new": run(**ranks, DET_LIGHTNING_TEST_WARM="0"),
        "no_warm_start": run(DET_LIGHTNING_WARM_START="0")}
sleeper = subprocess.Popen(
    [sys.executable, "-c", "import sys, time; print('torch' in sys.modules, flush=True); "
     "time.sleep(600)"], stdout=subprocess.PIPE, text=True, start_new_session=True,
)
seen["sleeper_warm"] = sleeper.stdout.readline().strip() == "True"
try:
    sleeper.wait(timeout=0.05)
except subprocess.TimeoutExpired:
    seen["still_running"] = True
os.killpg(sleeper.pid, signal.SIGTERM)
seen["ended"] = sleeper.wait(timeout=60)
sleeper.stdout.close()
seen["status"] = subprocess.call([sys.executable, "-c", "raise SystemExit(3)"])
print(json.dumps(seen))
"""


def test_what_a_warm_child_starts_is_forked_warm_and_sees_what_a_new_one_would(
    isolated_run: pathlib.Path,
) -> None:
    """The processes a warm child starts (``zygote.serve_descendants``) are forked too, and
    see what new interpreters would: arguments, working directory, environment, standard
    input, descriptors, the starter's process group, and the rank Lightning and torchmetrics
    read from the environment at import; they can be waited for (with a timeout), signalled,
    and give their exit status. DET_LIGHTNING_WARM_START=0 keeps new interpreters."""
    result = warm.run(
        [sys.executable, "-c", STARTER, GRANDCHILD],
        cwd=isolated_run,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    forked, new = seen["warm"], seen["new"]
    assert forked.pop("warm") and not new.pop("warm")
    a, b = forked.pop("env"), new.pop("env")
    assert a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
    assert forked == new
    assert forked["rank"] == forked["metrics_rank"] == 1
    assert forked["in_starters_group"] and forked["cwd"] == "/" and forked["stdin"] == "in"
    assert forked["argv"][0] == "-c" and forked["name"] == "__main__"
    assert not seen["no_warm_start"]["warm"]
    assert seen["no_warm_start"]["rank"] == seen["no_warm_start"]["metrics_rank"] == 0
    assert seen["sleeper_warm"] and seen["still_running"]
    assert seen["ended"] == -signal.SIGTERM and seen["status"] == 3


def test_a_warm_childs_server_dies_with_it_and_what_it_started_lives_on(
    isolated_run: pathlib.Path,
) -> None:
    """SIGKILL to a warm child: the server that forked its processes goes with it, and those
    processes live on, as a killed parent's children do (here in a session of their own)."""
    starter = warm.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
            "start_new_session=True)\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    child = int(starter.stdout.readline())
    server = _parent_of(child)
    assert server != starter.pid and _parent_of(server) == starter.pid
    try:
        starter.kill()
        assert starter.wait(60) == -signal.SIGKILL
        for _ in range(600):  # the server's SIGKILL (PR_SET_PDEATHSIG) arrives at once
            if not pathlib.Path(f"/proc/{server}").exists() or _state(server) == "Z":
                break
            time.sleep(0.05)
        assert not pathlib.Path(f"/proc/{server}").exists() or _state(server) == "Z"
        assert _state(child) in ("S", "R"), "the server's child lives on"
    finally:
        os.killpg(child, signal.SIGKILL)
        starter.stdout.close()


def _stat(pid: int) -> List[str]:
    return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _parent_of(pid: int) -> int:
    return int(_stat(pid)[1])


def _state(pid: int) -> str:
    return _stat(pid)[0]


def test_where_a_child_could_differ_it_is_a_new_interpreter(isolated_run: pathlib.Path) -> None:
    assert not _describe("-X", "importtime", "-c", DESCRIBE, cwd=isolated_run)["warm"]
    assert not _describe("-c", DESCRIBE, cwd=isolated_run, env={"ONLY": "this"})["warm"]
    (isolated_run / "tensorboard").mkdir()  # a run's logs: a namespace portion at most
    assert _describe("-c", DESCRIBE, cwd=isolated_run)["warm"]
    (isolated_run / "tensorboard" / "__init__.py").write_text("")  # a package: it shadows
    assert not _describe("-c", DESCRIBE, cwd=isolated_run)["warm"]
    (isolated_run / "tensorboard" / "__init__.py").unlink()
    (isolated_run / "optuna.py").write_text("")  # shadows a preloaded module
    assert not _describe("-c", DESCRIBE, cwd=isolated_run)["warm"]


def test_a_path_that_finds_the_same_programs_stays_warm(
    isolated_run: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The preloads read ``PATH`` (torchmetrics looks for ``latex``): another ``PATH`` is the
    same to them unless it finds another program they looked for."""
    folder = tmp_path / "programs"
    folder.mkdir()
    env = {**_environment(), "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    assert _describe("-c", DESCRIBE, cwd=isolated_run, env=env)["warm"]
    latex = folder / "latex"
    latex.write_text("#!/bin/sh\n")
    latex.chmod(0o755)
    if "latex" in _looked_up_by_the_preloads():
        assert not _describe("-c", DESCRIBE, cwd=isolated_run, env=env)["warm"]


def _looked_up_by_the_preloads() -> set:
    result = warm.run(
        [sys.executable, "-c", "import torchmetrics.utilities.imports as i; print(i.__file__)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    source = pathlib.Path(result.stdout.strip()).read_text()
    return {"latex"} if 'shutil.which("latex")' in source else set()


def test_the_commands_for_shell_scripts_fork_warm_and_exit_as_the_child(
    isolated_run: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """``warm_client``'s ``python`` and ``det-lightning`` on a script's ``PATH``: forked warm,
    their output, exit status and signals the child's."""
    commands = warm_client.commands(tmp_path / "bin", warm.socket_path())
    env = {**_environment(), "PATH": f"{commands}{os.pathsep}{os.environ['PATH']}"}
    (isolated_run / "describe.py").write_text(DESCRIBE)

    def bash(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", script],
            cwd=isolated_run,
            env=env,
            input="from stdin",
            capture_output=True,
            text=True,
            timeout=300,
        )

    seen = json.loads(bash("python describe.py a").stdout)
    assert seen["warm"] and seen["argv"] == ["describe.py", "a"]
    shell = ("PWD", "SHLVL", "_")  # bash's own
    assert {k: v for k, v in seen["env"].items() if k not in shell} == {
        k: v for k, v in env.items() if k not in shell
    }, "the script's environment, without the commands' socket"
    assert seen["stdin"] == "from stdin" and seen["cwd"] == str(isolated_run)
    assert bash("python -c 'import sys; sys.exit(3)'").returncode == 3
    assert (
        bash("python -c 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)'").returncode
        == -signal.SIGTERM
    )
    sleeper = subprocess.Popen(  # the command itself (its sh execs the client)
        [
            str(commands / "python"),
            "-c",
            "import os, time; print(os.getpid(), flush=True); time.sleep(300)",
        ],
        cwd=isolated_run,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sleeper.stdout is not None
    child = int(sleeper.stdout.readline())
    assert child != sleeper.pid, "the child is the server's, not the command's own process"
    sleeper.send_signal(signal.SIGTERM)
    assert sleeper.wait(60) == -signal.SIGTERM
    assert not os.path.exists(f"/proc/{child}"), "SIGTERM reached the child, which ended"
    sleeper.stdout.close()
    helped = bash("det-lightning --help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: det-lightning")
    assert bash("det-lightning no-such-command").returncode == 2


@pytest.mark.new_interpreters
def test_the_marker_starts_new_interpreters(isolated_run: pathlib.Path) -> None:
    assert not _describe("-c", DESCRIBE, cwd=isolated_run)["warm"]


DESCRIBING_TRIAL = """
import json, os, signal, sys, threading
from model_def import RegressionTrial


class DescribingTrial(RegressionTrial):
    def __init__(self, context):
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().split(b"\\0")
        described = {
            "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
            "main": getattr(sys.modules["__main__"], "__spec__", None) is not None
            and sys.modules["__main__"].__spec__.name,
            "env": sorted(os.environ), "threads": threading.active_count(),
            "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "sighup": signal.getsignal(signal.SIGHUP) == signal.SIG_DFL,
            "fds": len(os.listdir("/proc/self/fd")),
            "group": os.getpgid(0) == os.getpid(),
            "template": [a.decode() for a in parent[1:3]],
        }
        with open(os.environ["DESCRIBE_TO"], "a") as f:
            f.write(json.dumps(described) + "\\n")
        super().__init__(context)
"""


def _describe_a_trial(project: pathlib.Path, work: pathlib.Path, cold: bool) -> dict:
    from tests.integration.cli_support import run_cli

    out = work / f"described-{cold}.jsonl"
    warm.set_cold(cold)
    try:
        result = run_cli(
            "experiment", "--config", "searcher.max_length.batches=2",
            "--config", f"name=describe-{cold}", str(project / "describe.yaml"), str(project),
            cwd=work, env={"DESCRIBE_TO": str(out)},
        )  # fmt: skip
    finally:
        warm.set_cold(False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Warning:" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    [described] = [json.loads(line) for line in out.read_text().splitlines()]
    return described


def test_a_trial_of_the_prepared_template_starts_as_one_of_a_new_template(
    isolated_run: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The command line's first search worker takes a template forked as the child started
    (``zygote._prepare_template``) instead of starting ``python -m
    det_lightning._runner._template``; the trial it forks sees what a trial forked from a new
    interpreter's template sees."""
    import shutil

    from tests.integration.cli_support import PROJECT

    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    (project / "describe_def.py").write_text(DESCRIBING_TRIAL)
    config = (project / "const.yaml").read_text()
    config = config.replace("model_def:RegressionTrial", "describe_def:DescribingTrial")
    (project / "describe.yaml").write_text(config)
    prepared = _describe_a_trial(project, isolated_run, cold=False)
    new = _describe_a_trial(project, isolated_run, cold=True)
    # The prepared template is a fork of the zygote's child: its command line is the zygote's.
    assert prepared.pop("template")[0].endswith("zygote.py")
    assert new.pop("template") == ["-m", "det_lightning._runner._template"]
    assert prepared == new


@pytest.mark.parametrize(
    ("args", "env", "prepared"),
    [
        (["-m", "det_lightning", "experiment", "c.yaml", "."], {}, True),
        (["-m", "det_lightning._runner.cli", "run", "train.py"], {}, True),
        (["-m", "det_lightning", "experiment", "--help"], {}, False),
        (["-m", "det_lightning", "--version"], {}, False),
        (["train.py"], {}, False),
        (["-c", "import det_lightning"], {}, False),
        (["-m", "det_lightning", "run", "train.py"], {"DET_LIGHTNING_WARM_START": "0"}, False),
    ],
)
def test_a_template_is_prepared_only_for_the_command_line(
    args: list, env: dict, prepared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(pathlib.Path(warm.__file__).parent))
    try:
        import zygote
    finally:
        sys.path.pop(0)
    monkeypatch.delenv("DET_LIGHTNING_WARM_START", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parsed = zygote.parse_python_args(args)
    assert zygote.runs_the_command_line(parsed) is prepared


def test_an_empty_environment_is_empty_as_for_subprocess(isolated_run: pathlib.Path) -> None:
    """``env={}`` is an empty environment, not the caller's (``subprocess``'s meaning)."""
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    kwargs: dict = {"env": {}, "capture_output": True, "text": True, "timeout": 300}
    forked = warm.run([sys.executable, "-c", code], **kwargs)
    new = subprocess.run([sys.executable, "-c", code], **kwargs)
    assert forked.returncode == new.returncode == 0, forked.stderr + new.stderr
    assert json.loads(forked.stdout) == json.loads(new.stdout)
    assert "PATH" not in json.loads(forked.stdout)
