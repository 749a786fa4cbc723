"""``python -m ateam.console.web [--read-only]``: one browser tab's console.

textual-serve runs this for each WebSocket, with its web driver in the environment;
it is not meant to be typed (``ateam console --web`` is).
"""

from __future__ import annotations

import argparse

from ateam.console.web.session import run_session


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m ateam.console.web")
    parser.add_argument("--read-only", action="store_true", help="a console that only watches")
    return run_session(watch_only=parser.parse_args().read_only)


if __name__ == "__main__":
    raise SystemExit(main())
