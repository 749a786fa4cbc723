"""What an agent keeps on disk and must never lose: its queue, history, plan, usage, fence.

The lowest floor of the agent: nothing here imports another part of ``ateam.agent``
except this package.
"""
