"""Running a project's agents as supervised background processes (``ateam up``).

``ateam up`` (and ``ateam start``) start one detached supervisor process per project
(its own session, so closing the console or the terminal stops nothing). The supervisor
starts its agents, appends each agent's output to its ``state/agent.log``, and restarts
an agent that died — but never one that stopped on purpose or cannot run (see
:data:`FINAL_EXITS`) until someone asks again with ``ateam start`` or ``ateam up``.
``ateam down`` sends the supervisor SIGTERM; it passes SIGTERM (the agent's graceful
shutdown) to every agent and exits once they have.

The package, one concern per module::

    exits.py    how a process ended: backoff, final exits, state/exit.json, the bus record
    control.py  the run files: the supervisor's pid and log, start requests, keepers' pids
    process.py  the supervisor process itself (python -m ateam.supervisor ROOT [NAME…])
    up.py       the command side: start_agents (up, start, restart), stop_agents (down)

Agents a console started (``/spawn``, ``/agent new``, ``/offload``) run under keepers
(:mod:`ateam.fleet`) that leave their pid in the agent's ``state/keeper.pid``; ``down``
stops those too.
"""

from __future__ import annotations

from ateam.supervisor.control import (
    KEEPER_PID_FILE,
    keeper_pid,
    project_keepers,
    request_start,
    supervisor_pid,
)
from ateam.supervisor.exits import (
    EXIT_FILE,
    FINAL_EXITS,
    HEALTHY_AFTER_S,
    RESTART_BACKOFF_S,
    UNLISTED_EXITS,
    AgentExit,
    last_error_line,
    publish_final_exit,
    read_exit,
    record_exit,
    restart_delay,
    restart_env,
)
from ateam.supervisor.process import STOP_TIMEOUT_S, Supervisor, main
from ateam.supervisor.up import (
    START_TIMEOUT_S,
    AgentOutcome,
    Outcome,
    Started,
    running_agents,
    start_agents,
    stop_agents,
)

__all__ = [
    "EXIT_FILE",
    "FINAL_EXITS",
    "HEALTHY_AFTER_S",
    "KEEPER_PID_FILE",
    "RESTART_BACKOFF_S",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "UNLISTED_EXITS",
    "AgentExit",
    "AgentOutcome",
    "Outcome",
    "Started",
    "Supervisor",
    "keeper_pid",
    "last_error_line",
    "main",
    "project_keepers",
    "publish_final_exit",
    "read_exit",
    "record_exit",
    "request_start",
    "restart_delay",
    "restart_env",
    "running_agents",
    "start_agents",
    "stop_agents",
    "supervisor_pid",
]
