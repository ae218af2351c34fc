"""``python -m replay``: the ``deltalog`` command line."""

import sys

from replay.cli import main

sys.exit(main())
