"""``det.get_cluster_info()`` in a search's trial: what Determined's ``ClusterInfo`` gives a
trial script, and a clear error for its cluster-only parts (a slot's or container's, a
master's), which were an ``AttributeError`` with no word of what to use."""

import pytest

from det_lightning import errors
from det_lightning._info import ClusterInfo, TrialInfo


def _info(config: dict) -> ClusterInfo:
    return ClusterInfo(TrialInfo(3, 7, {"lr": 0.1}, config), latest_checkpoint="/c/x")


def test_user_data_is_the_configs_data_section_as_in_determined() -> None:
    assert _info({"data": {"url": "s3://d"}}).user_data == {"url": "s3://d"}
    assert _info({}).user_data == {}


@pytest.mark.parametrize(
    "name, words",
    [
        ("slot_ids", "one per slot (resources.slots_per_trial, --devices N)"),
        ("container_addrs", "core_api/4_distributed.py) runs its worker part directly"),
        ("container_rank", "DistributedContext.from_torch_distributed()"),
        ("gpu_uuids", "one per slot"),
        ("task_id", "info.trial.trial_id and info.trial.experiment_id name the trial"),
        ("session_token", "there is no master"),
    ],
)
def test_cluster_only_parts_raise_naming_what_to_use(name: str, words: str) -> None:
    info = _info({})
    with pytest.raises(errors.NotProvidedAttributeError, match=f"ClusterInfo.{name} is not") as e:
        getattr(info, name)
    assert words in str(e.value)
    assert isinstance(e.value, AttributeError) and not hasattr(info, name)
