"""The agent process: its composition root, lifecycle, RPC service and REPL."""
