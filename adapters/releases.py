"""Which Lightning releases det_lightning refuses to run on.

``lightning`` 2.6.2 and 2.6.3 were malicious releases: they stole credentials when imported
(advisory GHSA-w37p-236h-pfx3, Lightning issue 21691) and were removed from the index.
``pyproject.toml`` excludes them; this check covers an environment that installed one before,
and runs before ``lightning`` is imported by ``det_lightning.adapters``.
"""

from importlib import metadata
from typing import Optional

WITHDRAWN = ("2.6.2", "2.6.3")


def installed_lightning() -> Optional[str]:
    """The installed ``lightning`` distribution's version, or None when it is not installed."""
    try:
        return metadata.version("lightning")
    except metadata.PackageNotFoundError:
        return None


def refuse_withdrawn(version: Optional[str]) -> None:
    """Raises when ``version`` is a withdrawn, malicious Lightning release.

    >>> refuse_withdrawn("2.6.6"); refuse_withdrawn(None)
    >>> refuse_withdrawn("2.6.3")
    Traceback (most recent call last):
    ...
    ImportError: lightning 2.6.3 is a withdrawn, malicious release ...
    """
    if version in WITHDRAWN:
        raise ImportError(
            f"lightning {version} is a withdrawn, malicious release (advisory "
            "GHSA-w37p-236h-pfx3: it steals credentials on import). Uninstall it, rotate the "
            "credentials this environment could read, then `pip install "
            "'lightning>=2.4,<2.7,!=2.6.2,!=2.6.3'`."
        )
