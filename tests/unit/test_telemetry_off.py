"""redis-py's OpenTelemetry metrics left out of a process ateam runs (ateam/_telemetry_off.py).

Each case runs in a fresh interpreter: what is imported is a process's own. The test
extras install Chroma, which brings the OpenTelemetry SDK: the first case checks that,
so the others cannot pass for want of it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ateam.bus.connection import RedisTarget

OTEL = "[m for m in sys.modules if m.startswith('opentelemetry')]"


def _run(program: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_redis_py_imports_opentelemetry_where_it_is_installed() -> None:
    program = f"import sys, redis.asyncio\nprint(sorted({OTEL}))\n"
    imported = _run(program)[0]
    assert "'opentelemetry.sdk.metrics'" in imported and "'opentelemetry.metrics'" in imported


def test_installed_the_finder_spares_redis_py_those_imports_only() -> None:
    program = (
        "import sys\n"
        "from ateam import _telemetry_off\n"
        "_telemetry_off.install(); _telemetry_off.install()\n"
        "import redis.asyncio, redis.observability.providers as providers\n"
        f"print({OTEL}, providers.OTEL_AVAILABLE)\n"
        "redis.asyncio.Redis.from_url('redis://127.0.0.1:1')\n"  # the client still works
        "import opentelemetry.sdk.metrics\n"  # anyone else gets it (Chroma)
        "print('opentelemetry.sdk.metrics' in sys.modules)\n"
        "print(sum(type(f).__name__ == '_SkipRedisTelemetry' for f in sys.meta_path))\n"
    )

    assert _run(program) == ["[] False", "True", "1"]


def test_an_ateam_process_imports_no_opentelemetry(target: RedisTarget) -> None:
    # `ateam ps` as a user runs it (python -m ateam is the ateam command), in a bare
    # environment as a cron job's; at its exit it says what it imported.
    program = (
        "import atexit, runpy, sys\n"
        f"atexit.register(lambda: print('imported:', 'redis.asyncio' in sys.modules, {OTEL}))\n"
        f"sys.argv = ['ateam', 'ps', '--redis', {target.url!r}]\n"
        "runpy.run_module('ateam', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": os.environ["HOME"], "PATH": os.environ["PATH"]},
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "imported: True []"
