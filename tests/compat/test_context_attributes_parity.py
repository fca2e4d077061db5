"""Every attribute Determined 0.38.1's ``PyTorchTrialContext``, ``PyTorchTrial``, ``DataLoader``
and reducers set, against the real Determined in a child process
(``tests/fixtures/attribute_snapshot.py``).

The names are read from Determined's source (every ``self.X = ...`` in the class and its
Determined bases, and every class-level assignment), not typed by hand. Each is either provided
(:data:`PROVIDED`: Determined's type and value at the same moments of a run, or an object in the
same role) or refused (``det_lightning/_refused_attributes.py``): reading it raises an
``AttributeError`` subclass whose message names what to use.

The "seen" column says where public code was found reading or setting a private name (GitHub
code search of public repositories); "Determined" means only Determined's own code uses it.
"""

import ast
import importlib
import inspect
import json
import textwrap
from typing import Any, Dict, Iterator, List, Set

import pytest

from det_lightning import errors
from det_lightning._refused_attributes import REFUSED_ATTRIBUTES
from tests.fixtures.child import run_json

pytestmark = [pytest.mark.interop, pytest.mark.slow]

SAME = "same type and value"  # at every moment
ALIKE = "an object in the same role"  # present at every moment Determined's is

# {class: {attribute: (how it compares, where public code was seen using it)}}
PROVIDED: Dict[str, Dict[str, "tuple[str, str]"]] = {
    "PyTorchTrialContext": {
        "_epoch_len": (
            SAME,
            "determined-examples byol_pytorch train_batch; a test fixture sets it",
        ),
        "_current_batch_idx": (SAME, "trials' evaluate_full_dataset (+ 1); a test fixture sets it"),
        "_exp_conf": (SAME, "a test harness sets it before building the trial"),
        "_trial_seed": (SAME, "a DeepSpeed test sets it"),
        "_scaler": (SAME, "Determined's AMP fixtures set and read it"),
        "_aggregation_frequency": (SAME, "a trial's __init__ reads it (Determined's AMP fixture)"),
        "_tbd_writer": (SAME, "Determined's context tests assert it is None"),
        "_use_apex": (SAME, "Determined's Lightning adapter"),
        "_main_model": (SAME, "Determined's controllers (Horovod broadcast)"),
        "_hparams": (SAME, "not seen"),
        "_per_slot_batch_size": (SAME, "not seen"),
        "_global_batch_size": (SAME, "not seen"),
        "_num_gpus": (SAME, "not seen"),
        "_debug_enabled": (SAME, "not seen"),
        "_steps_completed": (SAME, "not seen"),
        "_to_device_warned_types": (SAME, "not seen"),
        "_wrapped_models": (SAME, "not seen"),
        "_optimizer_configs": (SAME, "not seen"),
        "_managed_training": (SAME, "not seen"),
        "_fp16_compression_default": (SAME, "not seen"),
        "_average_aggregated_gradients_default": (SAME, "a harness sets a similar name"),
        "_is_pre_trainer": (SAME, "not seen"),
        "_stop_requested": (SAME, "not seen"),
        "_enable_tensorboard_logging": (SAME, "not seen"),
        "device": (SAME, "public"),
        "models": (SAME, "public"),
        "optimizers": (SAME, "public"),
        "lr_schedulers": (SAME, "public"),
        "profiler": (SAME, "public"),
        "distributed": (ALIKE, "public: rank and size (det_lightning's DistributedContext)"),
        "experimental": (ALIKE, "public"),
        "_reducers": (ALIKE, "not seen (Determined's is an unused second registry)"),
    },
    "PyTorchTrial": {
        "trial_context_class": (ALIKE, "Determined's harness (det_lightning's context class)"),
    },
    "DataLoader": {
        **{
            name: (SAME, "public")
            for name in (
                "dataset batch_size sampler batch_sampler num_workers collate_fn "
                "drop_last timeout worker_init_fn multiprocessing_context generator "
                "prefetch_factor persistent_workers"
            ).split()
        },
        # Ours defaults to None (pin only when the trial's device is CUDA, docs/howto/gpu.md);
        # Determined's to False. An explicit value is kept as given, as in Determined.
        "pin_memory": (ALIKE, "public; a deliberate difference in the default"),
    },
    "_SimpleReducer": {
        "fn": (SAME, "not seen"),
        "values": (SAME, "not seen"),
        "NOT_METRIC": (ALIKE, "not seen"),
    },
    "Reducer": {name: (SAME, "public") for name in ("AVG", "SUM", "MAX", "MIN")},
    "MetricReducer": {},
}
# det_lightning's subclasses standing for Determined's class of an attribute's value.
OUR_TYPES = {"TrialSummaryWriter": "SummaryWriter"}
CLASSES = {
    "PyTorchTrialContext": "determined.pytorch._pytorch_context",
    "PyTorchTrial": "determined.pytorch._pytorch_trial",
    "DataLoader": "determined.pytorch._data",
    "_SimpleReducer": "determined.pytorch._reducer",
    "Reducer": "determined.pytorch._reducer",
    "MetricReducer": "determined.pytorch._reducer",
}
CONTEXT_MOMENTS = ("init", "train", "train_later", "evaluate")


def determined_attributes(class_name: str) -> Set[str]:
    """What Determined's class and its Determined bases assign: ``self.X = ...`` anywhere in
    their methods, and class-level names (nested classes and methods are not attributes)."""
    cls = getattr(importlib.import_module(CLASSES[class_name]), class_name)
    names: Set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("determined"):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
        assert isinstance(tree, ast.ClassDef)
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in _walk_skipping_classes(tree.body):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return names


def _walk_skipping_classes(body: List[ast.stmt]) -> Iterator[ast.AST]:
    """Every node under ``body`` except inside nested classes (whose ``self`` is another)."""
    stack: List[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if not isinstance(node, ast.ClassDef):
            yield node
            stack.extend(ast.iter_child_nodes(node))


def _refused(class_name: str) -> Dict[str, str]:
    prefix = class_name + "."
    return {k[len(prefix) :]: v for k, v in REFUSED_ATTRIBUTES.items() if k.startswith(prefix)}


def _all_names() -> Dict[str, List[str]]:
    return {c: sorted(determined_attributes(c)) for c in CLASSES}


@pytest.fixture(scope="module")
def seen() -> Dict[str, Any]:
    """Both APIs' descriptions of every attribute, from one child process."""
    return run_json("tests.fixtures.attribute_snapshot", json.dumps(_all_names()))


@pytest.mark.parametrize("class_name", sorted(CLASSES))
def test_every_attribute_is_provided_or_refused(class_name: str) -> None:
    determined = determined_attributes(class_name)
    provided, refused = set(PROVIDED[class_name]), set(_refused(class_name))
    assert not provided & refused, sorted(provided & refused)
    assert determined - provided - refused == set(), (
        f"attributes of Determined's {class_name} det_lightning neither provides nor refuses: "
        "add them to PROVIDED here, or to det_lightning/_refused_attributes.py"
    )
    assert (provided | refused) - determined == set(), "not set by Determined 0.38.1"


def test_the_source_reading_finds_the_real_contexts_attributes(seen: Dict[str, Any]) -> None:
    """A check of the checker: a real context's instance attributes are all found."""
    assert "_epoch_len" in determined_attributes("PyTorchTrialContext")
    assert set(seen["determined"]["vars"]) <= determined_attributes("PyTorchTrialContext")


def _moments(seen: Dict[str, Any], class_name: str) -> Dict[str, "tuple[Any, Any]"]:
    """``{moment: (theirs, ours)}`` of one class's descriptions."""
    if class_name == "PyTorchTrialContext":
        keys = CONTEXT_MOMENTS
        return {m: (seen["determined"][m], seen["det_lightning"][m]) for m in keys}
    return {
        "static": tuple(seen[api]["static"][class_name] for api in ("determined", "det_lightning"))
    }


@pytest.mark.parametrize("class_name", sorted(CLASSES))
def test_provided_attributes_are_determineds(seen: Dict[str, Any], class_name: str) -> None:
    wrong = []
    for moment, (theirs, ours) in _moments(seen, class_name).items():
        for name, (how, _) in PROVIDED[class_name].items():
            mine, real = ours[name], theirs[name]
            mine = [OUR_TYPES.get(mine[0], mine[0]), *mine[1:]]
            if how == SAME and mine != real:
                wrong.append((moment, name, real, mine))
            elif how == ALIKE and (mine[0] == "error") != (real[0] == "error"):
                wrong.append((moment, name, real, mine))
    assert wrong == []


@pytest.mark.parametrize("class_name", sorted(CLASSES))
def test_refused_attributes_name_what_to_use(seen: Dict[str, Any], class_name: str) -> None:
    for moment, (_, ours) in _moments(seen, class_name).items():
        for name, why in _refused(class_name).items():
            kind, exception, is_attribute_error, message = ours[name]
            assert (kind, exception, is_attribute_error) == (
                "error",
                errors.NotProvidedAttributeError.__name__,
                True,
            ), (moment, name)
            assert why in message, (moment, name)


def test_epoch_len_is_determineds_at_every_moment(seen: Dict[str, Any]) -> None:
    """BYOL (determined-ai/determined-examples: computer_vision/byol_pytorch) reads
    ``self.context._epoch_len`` in ``train_batch`` to schedule its learning rate: None in the
    trial's ``__init__``, then the training loader's length (here 60 records / 8 = 8)."""
    theirs = [seen["determined"][m]["_epoch_len"] for m in CONTEXT_MOMENTS]
    ours = [seen["det_lightning"][m]["_epoch_len"] for m in CONTEXT_MOMENTS]
    assert theirs == [["NoneType", None], ["int", 8], ["int", 8], ["int", 8]]
    assert ours == theirs


def test_current_batch_idx_is_the_batch_training(seen: Dict[str, Any]) -> None:
    """Trials compute the batches trained as ``context._current_batch_idx + 1`` in
    ``evaluate_full_dataset``."""
    ours = [seen["det_lightning"][m]["_current_batch_idx"] for m in CONTEXT_MOMENTS]
    assert ours == [["NoneType", None], ["int", 0], ["int", 9], ["int", 9]]
