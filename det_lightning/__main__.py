"""``python -m det_lightning`` and the ``det-lightning`` console script; see
``det_lightning._runner.cli``."""

import sys

from det_lightning._runner.cli import main

if __name__ == "__main__":
    sys.exit(main())
