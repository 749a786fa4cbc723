"""Coding agents (Claude Code, Codex, Gemini CLI ...) as ateam agents, over ACP (issue 24).

The Agent Client Protocol is how editors drive coding agents: JSON-RPC over the agent's
stdio. Here ateam is the editor. :mod:`.runner` runs a queued item as one prompt;
:mod:`.session` owns the runtime's process (:mod:`.process`, :mod:`.channel`) and its
session; :mod:`.editor` answers the runtime's requests for files, terminals
(:mod:`.terminals`) and permissions; :mod:`.stream` turns its updates into events and
history; :mod:`.provider` is the router's handle on a runtime; :mod:`.catalog` knows
the well-known runtimes; :mod:`.teammate` builds the ateam MCP server every session
gets, acting as the agent.
"""
