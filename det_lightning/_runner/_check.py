"""``det-lightning check [DIR] [CONFIG ...]``: would each Determined project here run?

For each experiment config (a ``*.yaml`` mapping with an ``entrypoint`` under DIR, or the
CONFIG files named), with its folder as the model directory::

    config     validate it (the schema's error, as `experiment` prints it)
    import     a model_def:Trial entrypoint is imported (and must be a PyTorchTrial); a script
               entrypoint must compile
    refused    the Determined names the code uses that det_lightning refuses, with the
               replacement (_check_scan)
    packages   the modules the code imports that this environment lacks
    ignored    the config keys that only mean something on a cluster (not a failure)
    smoke      Determined's test mode in a scratch folder: one batch of training, a validation,
               a checkpoint; then a second run restored from that checkpoint. A trial class runs
               in this process (every project's, one after another); a script runs under
               `det-lightning run` with $DET_LIGHTNING_TEST_MODE=1 and the cluster info of a
               search's trial, as `experiment` would start it; a Core API loop (no test
               mode) is not run, and a note says how to run it

One table for all of them, then the details of what failed. Exit status 1 if any would fail.
"""

import contextlib
import dataclasses
import io
import logging
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from det_lightning import compat
from det_lightning._env import (
    CHECKPOINT_DIR_ENV,
    LATEST_CHECKPOINT_ENV,
    TENSORBOARD_DIR_ENV,
    TEST_MODE_ENV,
    TRIAL_INFO_ENV,
)
from det_lightning._import import import_from_path
from det_lightning._info import ClusterInfo, TrialInfo
from det_lightning._runner._check_scan import (
    SKIPPED_DIRS,
    core_api_loop,
    entry_files,
    missing_packages,
    refused_names,
)
from det_lightning._runner.config import ExperimentConfig, load_config, random_points
from det_lightning._runner.config._yaml import load_yaml12
from det_lightning._runner.harness import load_trial_class
from det_lightning._runner.plan import plan_experiment
from det_lightning._runner.trial import command_environment

SMOKE_TIMEOUT_S = 600


@dataclasses.dataclass
class Report:
    """What ``check`` found for one experiment config."""

    config: pathlib.Path
    problems: List[str] = dataclasses.field(default_factory=list)  # each one fails the project
    refused: List[str] = dataclasses.field(default_factory=list)
    missing: List[str] = dataclasses.field(default_factory=list)
    ignored: List[str] = dataclasses.field(default_factory=list)
    notes: List[str] = dataclasses.field(default_factory=list)  # shown, never a failure
    smoke: str = "-"

    @property
    def ok(self) -> bool:
        return not (self.problems or self.refused or self.missing)


def find_configs(directory: pathlib.Path) -> List[pathlib.Path]:
    """Every ``*.yaml``/``*.yml`` under ``directory`` that is a mapping with an ``entrypoint``
    (hidden and generated folders left out)."""
    found = []
    for path in sorted([*directory.rglob("*.yaml"), *directory.rglob("*.yml")]):
        parts = path.relative_to(directory).parts[:-1]
        if any(p.startswith(".") or p in SKIPPED_DIRS for p in parts):
            continue
        try:
            raw = load_yaml12(path.read_text(encoding="utf-8"))
        except Exception:  # not YAML, or not ours: not an experiment config
            continue
        if isinstance(raw, dict) and "entrypoint" in raw:
            found.append(path)
    return found


def check_config(path: pathlib.Path, scratch: pathlib.Path, smoke: bool) -> Report:
    """Checks one experiment config (its folder is the model directory); see the module
    docstring. Never raises for a problem of the project: the report holds it."""
    report = Report(path)
    model_dir = path.parent
    try:
        config = load_config(path, announce=False)
    except Exception as e:
        report.problems.append(f"config: {e}")
        return report
    report.ignored = list(config.ignored_keys)
    try:
        plan = plan_experiment(config, model_dir, {"devices": 1}, str(scratch / "checkpoints"))
    except Exception as e:
        report.problems.append(f"import: {_one_line(e)}")
        return report
    # What the entrypoint reaches, not every file of the folder: another config's script may
    # import what this one never needs.
    files = entry_files(plan.model_dir, plan.trial_class, plan.command)
    report.refused = refused_names(model_dir, files)
    report.missing = missing_packages(model_dir, files)
    try:
        plan.tensorboard_root = scratch / "tensorboard"
        if plan.trial_class is not None:
            compat.install()  # model_def.py imports determined
            with import_from_path(model_dir):
                load_trial_class(plan.trial_class)
    except Exception as e:  # the entrypoint does not import, or is not a PyTorchTrial
        report.problems.append(f"import: {_one_line(e)}")
        return report
    if plan.command is not None and not _compiles(plan.command, model_dir, report):
        return report
    if smoke and report.ok and plan.command is not None and core_api_loop(model_dir, files):
        report.smoke = "no test mode"
        report.notes.append(
            "smoke: not run: a Core API loop (core.init(), no pytorch.Trainer) has no test mode "
            "(on Determined neither); `det-lightning experiment "
            f"{_shown(path, pathlib.Path.cwd())} {_shown(model_dir, pathlib.Path.cwd()) or '.'}` "
            "runs it"
        )
    elif smoke and report.ok:
        _smoke(report, config, plan, scratch)
    return report


def _compiles(command: List[str], model_dir: pathlib.Path, report: Report) -> bool:
    script = next((w for w in command if w.endswith(".py")), None)
    if script is None:
        return True
    try:
        source = (model_dir / script).read_text(encoding="utf-8")
        compile(source, script, "exec")
    except (OSError, SyntaxError, ValueError) as e:
        report.problems.append(f"import: {script}: {_one_line(e)}")
        return False
    return True


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _smoke(report: Report, config: ExperimentConfig, plan: Any, scratch: pathlib.Path) -> None:
    hparams = random_points(config.hyperparameters, 1, seed=0)[0]
    try:
        if plan.trial_class is not None:
            _smoke_trial_class(plan, hparams)
        else:
            _smoke_command(plan, config, hparams, scratch)
    except Exception as e:
        report.problems.append(f"smoke run: {_one_line(e)}")
        report.smoke = "FAILED"
        return
    report.smoke = "passed"


def _smoke_trial_class(plan: Any, hparams: Dict[str, Any]) -> None:
    """In this process: the trial for one batch with a validation and a checkpoint, then again
    restored from that checkpoint."""
    from det_lightning._runner.trial import run_legacy_trial
    from det_lightning.pytorch import Batch

    lengths = {"max_length": Batch(1), "validation_period": Batch(1), "checkpoint_period": Batch(1)}
    with _quiet():
        first = run_legacy_trial(plan, 1, hparams, lengths=lengths)
        if first.checkpoint is None:
            raise RuntimeError("the test-mode run wrote no checkpoint")
        restored = {**lengths, "max_length": Batch(2)}
        run_legacy_trial(plan, 1, hparams, lengths=restored, latest_checkpoint="latest")


def _smoke_command(
    plan: Any, config: ExperimentConfig, hparams: Dict[str, Any], scratch: pathlib.Path
) -> None:
    """``det-lightning run COMMAND`` in the model directory in test mode, as `experiment`
    starts it (a search's trial gets its cluster info; under ``single`` the script chooses its
    own hyperparameters), then again from the checkpoint it wrote."""
    checkpoints = scratch / "checkpoints"
    env = {
        **os.environ,
        TEST_MODE_ENV: "1",
        CHECKPOINT_DIR_ENV: str(checkpoints),
        TENSORBOARD_DIR_ENV: str(scratch / "tensorboard"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if plan.search is not None:
        env[TRIAL_INFO_ENV] = ClusterInfo(TrialInfo(1, 1, hparams, config.raw)).to_environment()
    env.update(command_environment(plan, env))  # one slot (the plan's): its layout, `python3`
    argv = [sys.executable, "-m", "det_lightning", "run", *plan.command]
    for attempt in ("first run", "restored run"):
        done = subprocess.run(
            argv,
            cwd=plan.model_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=SMOKE_TIMEOUT_S,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"{attempt} exited with status {done.returncode}: {last}")
        if not any(checkpoints.glob("*/state_dict.pth")):
            raise RuntimeError(f"the {attempt} wrote no checkpoint under {checkpoints}")
        env[LATEST_CHECKPOINT_ENV] = "latest"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The trials' progress lines and prints stay out of the table's way; warnings still
    print (on standard error)."""
    loggers = [logging.getLogger(n) for n in ("det_lightning", "lightning")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def configs_to_check(paths: Sequence[str]) -> List[pathlib.Path]:
    """The configs named, and those found under the directories named (default: ``.``)."""
    found: List[pathlib.Path] = []
    for name in paths or ["."]:
        path = pathlib.Path(name)
        found.extend(find_configs(path) if path.is_dir() else [path])
    return list(dict.fromkeys(p.resolve() for p in found))  # `check config.yaml .`: once


def _shown(path: pathlib.Path, root: pathlib.Path) -> str:
    """``path`` relative to ``root`` when it lies under it, else as it is."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def format_table(reports: Sequence[Report], root: pathlib.Path) -> str:
    """One line per config (``config  result  refused  missing  ignored  smoke``), then what
    made each failing one fail."""
    rows: List[Tuple[str, ...]] = [("config", "result", "refused", "missing", "ignored", "smoke")]
    for r in reports:
        name = _shown(r.config, root)
        rows.append(
            (name, "ok" if r.ok else "FAIL", *map(str, (len(r.refused), len(r.missing))),
             str(len(r.ignored)), r.smoke)
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for r in reports:
        details = [*r.problems, *(f"refused: {x}" for x in r.refused)]
        details += [f"missing package: {x}" for x in r.missing]
        details += [f"ignored locally: {x}" for x in r.ignored] if details else []
        details += [f"note: {x}" for x in r.notes]
        if details:
            lines.append(f"\n{_shown(r.config, root)}:")
            lines.extend(f"  {d}" for d in details)
    return "\n".join(lines)


def run_check(paths: Sequence[str], smoke: bool = True, scratch: Optional[str] = None) -> int:
    """Checks every config of ``paths`` and prints the table.

    Returns:
        0 when every project would run, 1 when one would not, 2 when there is nothing to check.
    """
    configs = configs_to_check(paths)
    if not configs:
        where = ", ".join(paths or ["."])
        print(f"det-lightning check: error: no experiment config (a YAML file with an entrypoint)"
              f" under {where}", file=sys.stderr)  # fmt: skip
        return 2
    reports = []
    with tempfile.TemporaryDirectory(prefix="det-lightning-check-", dir=scratch) as tmp:
        for index, config in enumerate(configs):
            reports.append(check_config(config, pathlib.Path(tmp) / str(index), smoke))
    print(format_table(reports, pathlib.Path.cwd()), flush=True)
    failed = sum(not r.ok for r in reports)
    print(f"\n{len(reports) - failed} of {len(reports)} would run.", flush=True)
    return 1 if failed else 0


def add_parser(commands: Any) -> None:
    """``det-lightning check`` on the command's subparsers (``add_subparsers``'s result)."""
    check = commands.add_parser(
        "check",
        help="would each Determined project here run? one table, status 1 if one would not",
        description="For each experiment config (every *.yaml with an entrypoint under DIR, "
        "default: the current folder, or the CONFIG files named; the config's folder is the "
        "model directory): validate it, import the entrypoint, list the Determined names the "
        "code uses that det_lightning refuses, the packages it imports that are missing, the "
        "keys ignored locally, then a smoke run in a scratch folder (Determined's test mode: a "
        "batch, a validation, a checkpoint, and a run restored from it).",
    )
    check.add_argument("paths", metavar="DIR|CONFIG", nargs="*", help="default: .")
    check.add_argument("--no-smoke", dest="smoke", action="store_false", help="skip the smoke runs")
    check.add_argument(
        "--scratch", default=None, help="where the scratch folder goes (default: the system's)"
    )
    check.set_defaults(handler=lambda args: run_check(args.paths, args.smoke, args.scratch))


__all__ = ["Report", "add_parser", "check_config", "find_configs", "format_table", "run_check"]
