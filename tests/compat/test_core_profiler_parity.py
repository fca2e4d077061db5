"""``core.ProfilerContext.on()`` refuses what Determined 0.38.1's refuses, with its messages."""

from typing import Any

import pytest

from det_lightning import core

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("args", [(0.05, 10), (1, 0), (1, 2.5), (0, 0)])
def test_the_same_arguments_are_refused_the_same_way(args: Any, tmp_path: Any) -> None:
    from determined.core import DummyDistributedContext
    from determined.core._profiler import ProfilerContext as Theirs

    theirs = Theirs(agent_id="agent", metrics=None, distributed=DummyDistributedContext())
    with pytest.raises(ValueError) as their_error:
        theirs.on(*args)
    ours = core.ProfilerContext(core.DummyDistributedContext(), tmp_path)
    with pytest.raises(ValueError) as our_error:
        ours.on(*args)
    assert str(our_error.value) == str(their_error.value)
