"""Which model an agent talks to: the router's choice among its configured models."""
