"""``python -m kafkalite <command>``: see :mod:`kafkalite.cli`."""

import sys

from kafkalite.cli import main

sys.exit(main())
