"""``python -m queryloop``: the same program as the ``queryloop`` command."""

import sys

from .frontends.cli import main

sys.exit(main())
