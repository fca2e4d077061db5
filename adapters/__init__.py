"""``det_lightning.adapters``: the bridge from the Determined API onto Lightning.

The only part of det_lightning that imports ``lightning``. Installed as ``det_lightning.adapters``
(the root ``adapters/`` folder in the source tree); always import it by that name.
"""


from det_lightning.adapters.lightning_module import LightningTrial

__all__ = ["LightningTrial"]
