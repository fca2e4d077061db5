"""``import determined`` in a Python process that a trial's script started: det_lightning.

A trial's processes have this folder's parent on ``PYTHONPATH`` (``_runner._stand_in``), as a
Determined task container has the real package installed: a launcher-style script's workers
(``python3 -m determined.launch.wrap_rank 0 -- python3 train.py worker``) import it. This
module takes itself out of ``sys.modules``, installs the alias, and leaves det_lightning in its
place, which the import system then returns.
"""

import sys

del sys.modules[__name__]

from det_lightning._runner.search._alias_boot import stand_in  # noqa: E402  after the removal above

sys.modules[__name__] = stand_in()
