"""``det_lightning.adapters``: the bridge from the Determined API onto Lightning.

The only part of det_lightning that imports ``lightning``. Installed as ``det_lightning.adapters``
(the root ``adapters/`` folder in the source tree); always import it by that name.
"""

from det_lightning.adapters.releases import installed_lightning, refuse_withdrawn

refuse_withdrawn(installed_lightning())  # before anything below imports lightning

from det_lightning.adapters.console import dedupe_lightning_console  # noqa: E402
from det_lightning.adapters.lightning_module import LightningTrial  # noqa: E402

# Importing Lightning gave it console handlers; with the user's own (logging.basicConfig) every
# Lightning line would print twice.
dedupe_lightning_console()

__all__ = ["LightningTrial"]
