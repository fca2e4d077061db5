"""The floor: a plain PyTorch loop doing the same math as the trial (DDP over gloo for two
processes), with bare ``torch.save``/``torch.load`` checkpoints."""

import os
import pathlib
import time
from typing import Any, Dict, List

import torch

import workloads
from common import Clock, save_costs, step_result
from workloads import Workload


def _loaders(w: Workload) -> Any:
    train, val = workloads.dataset(w, "train"), workloads.dataset(w, "val")
    sampler = None
    if w.processes > 1:
        sampler = torch.utils.data.DistributedSampler(train, shuffle=False)
    return (torch.utils.data.DataLoader(train, batch_size=w.batch_size, sampler=sampler),
            torch.utils.data.DataLoader(val, batch_size=w.batch_size))


def _validate(model: torch.nn.Module, loader: Any, loss: Any) -> float:
    model.eval()
    with torch.no_grad():
        losses = [loss(model(x), y) for x, y in loader]
    model.train()
    return float(torch.stack(losses).mean())


def _state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> Dict[str, Any]:
    # The two entries of Determined's state_dict.pth that carry the weight.
    return {"models_state_dict": [model.state_dict()], "optimizers_state_dict": [opt.state_dict()]}


def _train(w: Workload, model: Any, opt: Any, clock: Clock, save_dir: pathlib.Path) -> None:
    train_loader, val_loader = _loaders(w)
    loss_fn = workloads.loss_fn(w)
    step = 0
    while step < w.steps:
        for x, y in train_loader:
            clock.start()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            clock.end()
            step += 1
            if w.validation_every and step % w.validation_every == 0:
                _validate(model, val_loader, loss_fn)
            if w.checkpoint_every and step % w.checkpoint_every == 0:
                torch.save(_state(model, opt), str(save_dir / f"step-{step}.pth"))
            if step == w.steps:
                break


def _save_with_fsync(state: Dict[str, Any], path: pathlib.Path) -> float:
    start = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - start


def run(w: Workload, work: pathlib.Path) -> Dict[str, Any]:
    model = workloads.build_model(w)
    if w.processes > 1:
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = workloads.make_optimizer(w, model.parameters())
    clock = Clock()
    start = time.perf_counter()
    _train(w, model, opt, clock, work)
    world = torch.distributed.get_world_size() if w.processes > 1 else 1
    result = step_result(clock, model, time.perf_counter() - start, world)
    if w.measures == "checkpoint":
        result["save_s"] = save_costs(clock, w.checkpoint_every)
        result["save_fsync_s"] = [_save_with_fsync(_state(model, opt), work / f"fsync-{i}.pth")
                                  for i in range(2)]
        result["load_s"] = _load_times(w, work / f"step-{w.checkpoint_every}.pth")
    return result


def _load_times(w: Workload, path: pathlib.Path) -> List[float]:
    times = []
    for _ in range(2):
        model = workloads.build_model(w)
        opt = workloads.make_optimizer(w, model.parameters())
        start = time.perf_counter()
        state = torch.load(str(path), map_location="cpu", weights_only=True)
        model.load_state_dict(state["models_state_dict"][0])
        opt.load_state_dict(state["optimizers_state_dict"][0])
        times.append(time.perf_counter() - start)
    return times[1:]
