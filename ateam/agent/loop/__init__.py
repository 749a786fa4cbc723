"""Taking queued work one item at a time and running it through a :class:`TaskRunner`.

The loop knows a task runner only by the protocol in :mod:`ateam.agent.loop.task`; the
native model-and-tools runner (:mod:`ateam.agent.native`) is one, wired in by
:mod:`ateam.agent.runtime.build`, and another kind of runner plugs in beside it.
"""
