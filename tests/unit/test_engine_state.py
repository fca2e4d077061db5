"""``context.engine``: the state the context shares with the trainer and the adapters.

The context's underscored attributes belong to the context's own modules; a scan of every other
module in ``det_lightning/`` and ``adapters/`` (the engine state's own module included: it is a
plain object the context owns, not a window onto the context) keeps it that way, whatever the
receiver is called (``context._scaler``, ``self.module.context._tbd_writer``,
``getattr(ctx, "_optimizer_configs")``).
"""

import ast
import contextlib
import pathlib
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest
import torch

from det_lightning import errors, pytorch
from det_lightning.pytorch._launch_options import LaunchOptions

REPO = pathlib.Path(__file__).resolve().parents[2]

# The context's own modules: its base class, the context (with Determined's attribute names)
# and ``context.experimental``.
CONTEXT_MODULES = {
    "det_lightning/_trial_context.py",
    "det_lightning/pytorch/_context.py",
    "det_lightning/pytorch/_context_attributes.py",
    "det_lightning/pytorch/_experimental.py",
}
CONTEXT_CLASSES = {
    "TrialContext",
    "PyTorchTrialContext",
    "DeterminedAttributes",
    "PyTorchExperimentalContext",
}

# Modules outside the context allowed to use its underscored attributes: none.
ALLOWED: "set[str]" = set()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names() -> Set[str]:
    """Every underscored attribute and method the context classes define for themselves."""
    names: Set[str] = set()
    for path in CONTEXT_MODULES:
        tree = ast.parse((REPO / path).read_text())
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef) or cls.name not in CONTEXT_CLASSES:
                continue
            for node in ast.walk(cls):
                # Methods, and Determined's attribute names kept as properties (``_scaler``).
                if isinstance(node, ast.FunctionDef) and _is_private(node.name):
                    names.add(node.name)
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and _is_private(node.attr)
                ):
                    names.add(node.attr)
    return names


PRIVATE = _private_names()


def private_uses(source: str, private: Set[str]) -> List[Tuple[int, str]]:
    """``(line, name)`` of each use of a ``private`` attribute on anything but ``self``/``cls``
    (a class's own attribute of the same name is its business), by attribute or by name in
    ``getattr``/``setattr``/``hasattr``/``delattr``."""
    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in private:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                uses.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in private
        ):
            uses.append((node.lineno, str(node.args[1].value)))
    return sorted(uses)


def _modules() -> Iterator[str]:
    for folder in ("det_lightning", "adapters"):
        for path in sorted((REPO / folder).rglob("*.py")):
            yield path.relative_to(REPO).as_posix()


def _uses_by_module() -> "dict[str, List[Tuple[int, str]]]":
    found = {}
    for module in _modules():
        if module in CONTEXT_MODULES:
            continue
        uses = private_uses((REPO / module).read_text(), PRIVATE)
        if uses:
            found[module] = uses
    return found


def test_the_private_names_come_from_the_context_classes() -> None:
    # A sample, so a scan that found no names (and so no uses) cannot pass unnoticed.
    assert {
        "_scaler",
        "_optimizer_configs",
        "_exp_conf",
        "_stop_requested",
        "_parent",
        "_tbd_writer",
        "_check_not_training",
    } <= PRIVATE


@pytest.mark.parametrize(
    "source, expected",
    [
        ("context._scaler = None", [(1, "_scaler")]),
        ("x = self.module.context._tbd_writer", [(1, "_tbd_writer")]),
        ("ctx.experimental._parent", [(1, "_parent")]),
        ("getattr(c, '_optimizer_configs', {})", [(1, "_optimizer_configs")]),
        ("c._check_not_training('x')", [(1, "_check_not_training")]),
        ("self._backend = backend\ncls._scaler", []),
        ("context.engine.scaler\ngetattr(c, 'launch')", []),
    ],
)
def test_the_scan_finds_private_uses(source: str, expected: List[Tuple[int, str]]) -> None:
    assert private_uses(source, PRIVATE) == expected


def test_no_module_outside_the_context_uses_its_private_attributes() -> None:
    offending = {m: uses for m, uses in _uses_by_module().items() if m not in ALLOWED}
    assert not offending, (
        f"{offending}: use context.engine (det_lightning/pytorch/_engine_state.py) instead of the "
        "context's underscored attributes, adding a field there if none fits."
    )


def test_the_allow_list_only_names_files_that_still_need_it() -> None:
    stale = ALLOWED - set(_uses_by_module())
    assert not stale, (
        f"{sorted(stale)} no longer use the context's privates: drop them from ALLOWED."
    )


# ----- the members behave ----------------------------------------------------------------
def _context(**kwargs: Any) -> pytorch.PyTorchTrialContext:
    return pytorch.PyTorchTrialContext(hparams={"global_batch_size": 4}, **kwargs)


def test_configuration_is_the_objects_given_and_none_when_absent() -> None:
    hparams: Dict[str, Any] = {"global_batch_size": 4}
    exp_conf: Dict[str, Any] = {"searcher": {}}
    engine = pytorch.PyTorchTrialContext(hparams=hparams, exp_conf=exp_conf).engine
    assert engine.hparams is hparams and engine.exp_conf is exp_conf
    bare = pytorch.PyTorchTrialContext().engine
    assert bare.hparams is None and bare.exp_conf is None
    assert _context(aggregation_frequency=3).engine.aggregation_frequency == 3


def test_steps_completed_is_the_initial_batch() -> None:
    context = _context(steps_completed=5)
    assert context.engine.steps_completed == 5
    context.engine.steps_completed = 12
    assert context.get_initial_batch() == 12


def test_batches_and_epochs() -> None:
    context = _context()
    engine = context.engine
    with pytest.raises(errors.InternalException, match="Training DataLoader uninitialized"):
        engine.require_epoch_len()
    with pytest.raises(errors.InternalException, match="Training hasn't started"):
        engine.should_step()
    engine.epoch_len = 3
    engine.begin_batch(5)
    assert engine.require_epoch_len() == 3
    assert (context.current_train_batch(), context.current_train_epoch()) == (5, 1)
    assert context.is_epoch_end() and not context.is_epoch_start()


def test_should_step_ends_each_aggregation_window() -> None:
    engine = _context(aggregation_frequency=2).engine
    steps = []
    for idx in range(4):
        engine.begin_batch(idx)
        steps.append(engine.should_step())
    assert steps == [False, True, False, True]


class _RecordingBackend:
    def __init__(self) -> None:
        self.calls: List[str] = []

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.calls.append("backward")
        loss.backward(**kwargs)

    def step(self, optimizer: torch.optim.Optimizer, step_fn: Any) -> None:
        self.calls.append("step")
        step_fn()

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append("zero_grad")
        optimizer.zero_grad()

    def no_sync(self) -> Any:
        return contextlib.nullcontext()


def test_start_training_installs_the_backend_and_closes_wrapping() -> None:
    context = _context()
    model = context.wrap_model(torch.nn.Linear(1, 1))
    opt = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    backend = _RecordingBackend()
    context.engine.start_training(backend)
    with pytest.raises(errors.InvalidExperimentException, match="after training started"):
        context.wrap_model(torch.nn.Linear(1, 1))
    context.engine.begin_batch(0)
    context.backward(model(torch.ones(1, 1)).sum())
    context.step_optimizer(opt)
    assert backend.calls == ["backward", "step", "zero_grad"]
    assert model.weight.grad is None  # (zeroed through the backend, set_to_none)


class _SkippingScaler:
    """A GradScaler that found inf gradients: it never steps the optimizer."""

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        pass


def test_skipped_steps_names_the_optimizers_a_scaler_skipped() -> None:
    context = _context()
    model = context.wrap_model(torch.nn.Linear(1, 1))
    opt = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    context.engine.begin_batch(0)
    context.backward(model(torch.ones(1, 1)).sum())
    assert context.engine.skipped_steps == set()
    context.step_optimizer(opt, scaler=_SkippingScaler())
    assert context.engine.skipped_steps == {id(opt)}


def test_scaler_and_auto_amp() -> None:
    context = _context()
    assert context.engine.scaler is None and context.engine.auto_amp is False
    scaler = object()
    context.wrap_scaler(scaler)
    assert context.engine.scaler is scaler
    context.engine.auto_amp = True
    other = object()
    context.engine.scaler = other
    assert context.engine.scaler is other and context.engine.auto_amp is True
    with pytest.raises(errors.InvalidExperimentException, match="only call wrap_scaler"):
        context.wrap_scaler(object())


def test_experimental_switches() -> None:
    context = _context()
    assert context.engine.auto_to_device and not context.engine.data_repro_checks_disabled
    context.experimental.disable_auto_to_device()
    context.experimental.disable_dataset_reproducibility_checks()
    assert not context.engine.auto_to_device and context.engine.data_repro_checks_disabled
    context.experimental.use_amp()
    assert context.engine.auto_amp is True


def test_profiler_args_are_set_profilers() -> None:
    context = _context()
    assert context.engine.profiler_args is None
    context.set_profiler(1, record_shapes=True)
    assert context.engine.profiler_args == ((1,), {"record_shapes": True})


def test_launch_options() -> None:
    context = _context()
    assert context.engine.launch_options == LaunchOptions()
    context.engine.launch_options = LaunchOptions(accelerator="cpu")
    assert context.engine.launch_options.trainer_kwargs() == {"accelerator": "cpu"}


def test_determineds_attribute_names_are_the_engine_state() -> None:
    # Determined's own test fixtures set context._scaler; get_initial_batch() reads
    # _steps_completed, which fit() moves through the engine on a resume.
    context = _context(steps_completed=3)
    scaler = object()
    context._scaler = scaler
    assert context.engine.scaler is scaler and context._scaler is scaler
    context.engine.steps_completed = 7
    assert context.get_initial_batch() == 7
    assert context._tbd_writer is None


def test_tensorboard_path_and_writer(tmp_path: pathlib.Path) -> None:
    context = _context()
    assert context.engine.tensorboard_path is None
    with pytest.raises(errors.InternalException, match="chosen when Trainer.fit"):
        context.get_tensorboard_path()
    context.engine.tensorboard_path = tmp_path
    assert context.get_tensorboard_path() == tmp_path
    writer = context.get_tensorboard_writer()
    assert context.get_tensorboard_writer() is writer
    context.engine.close_tensorboard_writer()
    assert context.get_tensorboard_writer() is not writer
    context.engine.close_tensorboard_writer()
