"""The table printed after an experiment, sized for the terminal it is printed to.

One row per trial; hyperparameters every trial shares go on one line below the table, the
checkpoint column shows each checkpoint relative to the checkpoint root (printed once), or by
its UUID (or the UUID's first 8 characters) where the terminal is too narrow, and a trial's
hyperparameters wrap onto a second line, cut with ``...`` after it. The best trial and the
command's wall time close it.
"""

import dataclasses
import shutil
import sys
import textwrap
from typing import Any, Dict, List, Optional, Sequence, Tuple

from det_lightning._runner.trial import FINISHED, TrialResult
from det_lightning.pytorch._store import CheckpointStore

DEFAULT_WIDTH = 100  # where stdout is no terminal (a log file, a pipe)
_MIN_HPARAMS = 24  # the hyperparameters column narrows to this before the checkpoints do
_GAP = "  "


def terminal_width() -> int:
    """Columns of the terminal on stdout, or ``DEFAULT_WIDTH`` where stdout is none."""
    if not sys.stdout.isatty():
        return DEFAULT_WIDTH
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def _flat(hparams: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in hparams.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _cut(text: str, width: int) -> str:
    """``text``, cut to ``width`` characters with ``...`` where it is longer.

    >>> _cut("lr=0.1, width=8", 10)
    'lr=0.1,...'
    """
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def best_trial(results: Sequence[TrialResult], smaller_is_better: bool) -> Optional[TrialResult]:
    """The completed trial with the best searcher metric, if any reported one."""
    scored = [r for r in results if r.status in FINISHED and r.best_metric is not None]
    if not scored:
        return None
    sign = 1.0 if smaller_is_better else -1.0
    return min(scored, key=lambda r: sign * float(r.best_metric or 0.0))


def shared_hparams(results: Sequence[TrialResult]) -> Dict[str, Any]:
    """The (flattened) hyperparameters every trial has with the same value (all of one
    trial's).

    >>> shared_hparams([TrialResult(1, {"a": 1, "b": 2}, "COMPLETED"),
    ...                 TrialResult(2, {"a": 1, "b": 3}, "COMPLETED")])
    {'a': 1}
    """
    if not results:
        return {}
    first, *rest = [_flat(r.hparams) for r in results]
    return {k: v for k, v in first.items() if all(k in o and o[k] == v for o in rest)}


def _relative(checkpoint: Optional[CheckpointStore], root: Optional[CheckpointStore]) -> str:
    """``checkpoint`` under ``root`` as the rest of its path, else in full; ``-`` for none."""
    if not checkpoint:
        return "-"
    full, base = str(checkpoint), str(root).rstrip("/") + "/" if root is not None else ""
    return full[len(base) :] if base and full.startswith(base) else full


def _duration(seconds: float) -> str:
    """A wall time as people read it.

    >>> _duration(3605.4), _duration(65), _duration(4.25)
    ('1 h 00 min 05 s', '1 min 05 s', '4.2 s')
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min {secs:02d} s"
    return f"{minutes} min {secs:02d} s"


def _widths(rows: List[List[str]], width: int, floor: int) -> List[int]:
    """Column widths for ``rows``: the hyperparameters column (the third) narrows, down to
    ``floor``, until the table fits ``width``."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    excess = sum(widths) + len(_GAP) * (len(widths) - 1) - width
    widths[2] -= max(0, min(excess, widths[2] - floor))
    return widths


def _fitted(rows: List[List[str]], width: int) -> Tuple[List[List[str]], List[int]]:
    """``rows`` and their column widths: checkpoints as paths relative to the root, else as
    their UUIDs, else as a UUID's first 8 characters, whichever first fits ``width`` with the
    hyperparameters at ``_MIN_HPARAMS`` or more (two lines of them)."""
    for shorten in (str, lambda c: c.rstrip("/").rsplit("/", 1)[-1], lambda c: c[:8]):
        rows = [rows[0]] + [[*row[:-1], shorten(row[-1])] for row in rows[1:]]
        widths = _widths(rows, width, _MIN_HPARAMS)
        if sum(widths) + len(_GAP) * (len(widths) - 1) <= width:
            return rows, widths
    return rows, _widths(rows, width, 12)


def _table(rows: List[List[str]], widths: List[int]) -> List[str]:
    """The rows in aligned columns: a hyperparameters cell wraps onto a second line, and
    what still does not fit is cut with ``...``."""
    lines = []
    for row in rows:
        hparams = textwrap.wrap(row[2], widths[2], max_lines=2, placeholder=" ...") or [""]
        for index, part in enumerate(hparams):
            cells = row if index == 0 else [""] * len(row)
            cells = [*cells[:2], part, *cells[3:]]
            lines.append(_GAP.join(_cut(c, w).ljust(w) for c, w in zip(cells, widths)).rstrip())
    return lines


def stopped_as(
    results: Sequence[TrialResult], word: str, statuses: Sequence[str] = ("INTERRUPTED",)
) -> List[TrialResult]:
    """``results`` with the trials a client's cancel or pause stopped before their end (those
    in ``statuses``) shown as ``word``, ``CANCELED`` or ``PAUSED``, as the client and Determined
    show them.

    >>> [r.status for r in stopped_as([TrialResult(1, {}, "COMPLETED"),
    ...                                TrialResult(2, {}, "INTERRUPTED")], "CANCELED")]
    ['COMPLETED', 'CANCELED']
    """
    return [dataclasses.replace(r, status=word) if r.status in statuses else r for r in results]


def format_summary(
    results: Sequence[TrialResult],
    metric: str,
    smaller_is_better: bool,
    *,
    root: Optional[CheckpointStore] = None,
    width: int = DEFAULT_WIDTH,
    wall_s: Optional[float] = None,
) -> str:
    """The table printed after an experiment: one row per trial, then the best trial.

    Args:
        results: the trials, in order.
        metric: the searcher's metric.
        smaller_is_better: the searcher's direction.
        root: the checkpoint root; checkpoints under it are shown relative to it.
        width: the columns to fit in (``terminal_width()``).
        wall_s: the command's wall time, shown last when given.

    >>> rows = [TrialResult(1, {"lr": 0.1, "n": 8}, "COMPLETED", 0.5, "/c/trial-1/a1", batches=8),
    ...         TrialResult(2, {"lr": 0.01, "n": 8}, "INTERRUPTED", 0.25, "/c/trial-2/b2"),
    ...         TrialResult(3, {"lr": 1.0, "n": 8}, "STOPPED_EARLY", 0.9, None, batches=2, rung=0)]
    >>> print(format_summary(rows, "loss", True, root="/c", wall_s=65))
    trial  status                   hyperparameters  batches  best loss  checkpoint
    1      COMPLETED                lr=0.1           8        0.5        trial-1/a1
    2      INTERRUPTED              lr=0.01          -        0.25       trial-2/b2
    3      STOPPED EARLY at rung 0  lr=1             2        0.9        -
    every trial: n=8
    checkpoints under /c
    best: trial 1 (loss=0.5), checkpoint trial-1/a1
    wall time 1 min 05 s
    """
    shared = shared_hparams(results)
    header = ["trial", "status", "hyperparameters", "batches", f"best {metric}", "checkpoint"]
    rows = [header] + [
        [
            str(r.number),
            r.state(),
            ", ".join(f"{k}={_show(v)}" for k, v in _flat(r.hparams).items() if k not in shared)
            or "-",
            str(r.batches) if r.batches is not None else "-",
            _show(r.best_metric) if r.best_metric is not None else "-",
            _relative(r.checkpoint, root),
        ]
        for r in results
    ]
    lines = _table(*_fitted(rows, width))
    if shared:
        listed = ", ".join(f"{k}={_show(v)}" for k, v in shared.items())
        label = "every trial" if len(results) > 1 else "hyperparameters"
        lines += textwrap.wrap(f"{label}: {listed}", width, subsequent_indent="  ")
    if root is not None and any(r.checkpoint for r in results):
        lines.append(f"checkpoints under {root}")
    best = best_trial(results, smaller_is_better)
    if best is not None:
        lines.append(
            f"best: trial {best.number} ({metric}={_show(best.best_metric)}), checkpoint "
            f"{_relative(best.checkpoint, root)}"
        )
    if wall_s is not None:
        lines.append(f"wall time {_duration(wall_s)}")
    return "\n".join(lines)
