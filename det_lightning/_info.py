"""Cluster information: det_lightning always runs locally, so there is none."""

from typing import Any, Optional


def get_cluster_info() -> Optional[Any]:
    """Returns None: there is no Determined cluster, so scripts take their local branch.

    >>> get_cluster_info() is None
    True
    """
    return None
