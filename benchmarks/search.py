"""What an ``adaptive_asha`` search costs and saves, on the test fixture project's trial.

    python benchmarks/search.py [--trials 12] [--max-time 32] [--out benchmarks/results]

Three runs of the same trial class, each ``det-lightning experiment`` in a fresh directory:

- ``sequential``: a random search of N trials, each trained to ``max_time`` batches, one after
  another (what ASHA saves against). Since random runs on the same Optuna worker loop as
  adaptive_asha, the baseline pays the loop's per-trial cost too (results before 2026-11-23
  ran it without Optuna);
- ``asha, 1 worker`` and ``asha, 2 workers`` (``--workers 2``): adaptive_asha over N trials.

Reported: wall time, batches trained in all, and the engine's cost per trial (the ASHA run's
time beyond what its batches cost at the sequential run's time per batch, over N: what ASHA's
rung bookkeeping adds to a random search's). Wall times on
a shared machine vary; read the ratios, which come from one run each, with care.
"""

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Dict

HERE = pathlib.Path(__file__).resolve().parent
PROJECT = HERE.parent / "tests" / "fixtures" / "determined_project"


def _config(searcher: str, trials: int, max_time: int) -> str:
    search = (f"  name: adaptive_asha\n  max_trials: {trials}\n  time_metric: batches\n"
              f"  max_time: {max_time}\n  divisor: 2\n  mode: aggressive\n  max_rungs: 4\n"
              if searcher == "asha" else
              f"  name: random\n  max_trials: {trials}\n  max_length:\n    batches: {max_time}\n")
    return (
        "name: bench\nentrypoint: model_def:RegressionTrial\nhyperparameters:\n"
        "  global_batch_size: 8\n  hidden_size: 8\n"
        "  learning_rate: {type: log, minval: -3, maxval: -0.5, base: 10}\n"
        "searcher:\n  metric: validation_loss\n" + search +
        f"min_validation_period:\n  batches: {max_time}\nreproducibility:\n  experiment_seed: 3\n"
    )


def _run(name: str, searcher: str, trials: int, max_time: int, workers: int) -> Dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        config = work / "exp.yaml"
        config.write_text(_config(searcher, trials, max_time))
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   DET_LIGHTNING_CHECKPOINT_DIR=str(work / "ckpt"))
        extra = ["--workers", str(workers)] if workers > 1 else []
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "det_lightning", "experiment", *extra,
                        str(config), str(PROJECT)], cwd=work, env=env, check=True,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        seconds = time.perf_counter() - start
        batches = 0
        for trial_dir in (work / "ckpt").glob("trial-*"):
            steps = [json.loads((p / "metadata.json").read_text())["steps_completed"]
                     for p in trial_dir.iterdir() if (p / "metadata.json").exists()]
            batches += max(steps, default=0)
    return {"seconds": seconds, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--max-time", type=int, default=32)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    runs = {
        "sequential (random, full length)": _run("seq", "random", args.trials, args.max_time, 1),
        "asha, 1 worker": _run("asha1", "asha", args.trials, args.max_time, 1),
        "asha, 2 workers": _run("asha2", "asha", args.trials, args.max_time, 2),
    }
    base = runs["sequential (random, full length)"]
    per_batch = base["seconds"] / max(base["batches"], 1)
    lines = [
        f"# adaptive_asha search: {args.trials} trials, max_time {args.max_time} batches",
        "", f"Command: `python benchmarks/search.py --trials {args.trials} --max-time "
        f"{args.max_time}`, {datetime.date.today()}, {os.cpu_count()} cores.", "",
        "| run | wall s | batches trained | vs sequential | engine cost per trial, s |",
        "|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        engine = (run["seconds"] - run["batches"] * per_batch) / args.trials
        lines.append(f"| {name} | {run['seconds']:.1f} | {run['batches']} | "
                     f"{run['seconds'] / base['seconds']:.2f} | "
                     f"{'-' if run is base else f'{engine:.2f}'} |")
    text = "\n".join(lines) + "\n"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"search_cpu-{os.cpu_count()}core_{datetime.date.today()}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
