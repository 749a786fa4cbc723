"""The typed shapes of what crosses the bus: events, RPC parameters and results, turns,
and the records the bus keeps for readers (context items, board tasks, owner claims).

Both sides import this package: the agent builds what it sends from it and checks what
it receives with it, the client reads events and replies through it. It sits below the
bus and knows nothing of Redis; the wire format itself stays msgpack maps, so an agent
and a console of different versions still understand each other (unknown fields are
kept, missing optional fields take their defaults).

Validation happens once, at the edge: the RPC server checks a request's parameters
against the method's model before the handler runs, and a consumer checks an event's
payload when it first reads it (:meth:`ateam.wire.events.parse_payload`).
"""
