"""``python -m ateam.supervisor ROOT [NAME…]``: what ``ateam up`` and ``ateam start`` run."""

from __future__ import annotations

import sys

from ateam.supervisor.process import main

if __name__ == "__main__":
    sys.exit(main())
