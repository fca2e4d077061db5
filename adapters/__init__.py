"""``det_lightning.adapters``: the bridge from the Determined API onto Lightning.

The only part of det_lightning that imports ``lightning``. Installed as ``det_lightning.adapters``
(the root ``adapters/`` folder in the source tree); always import it by that name.
"""

from det_lightning._import import without_project_modules
from det_lightning.adapters.releases import installed_lightning, refuse_withdrawn

refuse_withdrawn(installed_lightning())  # before anything below imports lightning

# Lightning and torchmetrics probe for optional packages as they import: a trial's directory
# with its own torchvision/ or matplotlib.py must not be what they find.
with without_project_modules():
    import lightning.pytorch  # noqa: E402, F401
    import torchmetrics  # noqa: E402, F401

from det_lightning.adapters.console import dedupe_lightning_console  # noqa: E402
from det_lightning.adapters.lightning_module import LightningTrial  # noqa: E402

# Importing Lightning gave it console handlers; with the user's own (logging.basicConfig) every
# Lightning line would print twice.
dedupe_lightning_console()

__all__ = ["LightningTrial"]
