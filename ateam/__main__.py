"""``python -m ateam`` is the ``ateam`` command."""

from __future__ import annotations

import sys

from ateam.cli import main

if __name__ == "__main__":
    sys.exit(main())
