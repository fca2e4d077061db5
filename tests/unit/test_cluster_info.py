"""``det.get_cluster_info()`` in a search's trial: what Determined's ``ClusterInfo`` gives a
trial script, and a clear error for its cluster-only parts (a slot's or container's, a
master's), which were an ``AttributeError`` with no word of what to use."""

import pytest

from det_lightning import errors
from det_lightning._env import NODE_SLOTS_ENV
from det_lightning._info import ClusterInfo, TrialInfo


def _info(config: dict) -> ClusterInfo:
    return ClusterInfo(TrialInfo(3, 7, {"lr": 0.1}, config), latest_checkpoint="/c/x")


def test_user_data_is_the_configs_data_section_as_in_determined() -> None:
    assert _info({"data": {"url": "s3://d"}}).user_data == {"url": "s3://d"}
    assert _info({}).user_data == {}


@pytest.mark.parametrize(
    "name, words",
    [
        ("slot_ids", "known in a `det-lightning experiment` trial on one machine"),
        ("container_addrs", "not one of several nodes"),
        ("container_rank", "DistributedContext.from_torch_distributed()"),
        ("gpu_uuids", "torch.cuda.get_device_properties(i).uuid"),
        ("task_id", "info.trial.trial_id and info.trial.experiment_id name the trial"),
        ("session_token", "there is no master"),
    ],
)
def test_cluster_only_parts_raise_naming_what_to_use(
    name: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(NODE_SLOTS_ENV, raising=False)  # not a trial on one machine
    info = _info({})
    with pytest.raises(errors.NotProvidedAttributeError, match=f"ClusterInfo.{name} is not") as e:
        getattr(info, name)
    assert words in str(e.value)
    assert isinstance(e.value, AttributeError) and not hasattr(info, name)


def test_a_trial_on_one_machine_has_its_layout_as_a_launcher_style_script_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Determined's ``core_api/4_distributed.py`` starts ``len(info.slot_ids)`` workers per
    container and meets at ``info.container_addrs[0]``."""
    monkeypatch.setenv(NODE_SLOTS_ENV, "3")
    info = _info({})
    assert info.slot_ids == [0, 1, 2]
    assert info.container_addrs == ["127.0.0.1"] and info.container_rank == 0
    assert info.container_slot_counts == [3]
