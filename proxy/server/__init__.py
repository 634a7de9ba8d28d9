"""The serving side: the HTTP/1.1 protocol llmmeter listens with (limits, timeouts,
coalesced writes) and the worker processes."""

# scope["extensions"][DISCONNECT]: how the relay learns its client left (proxy/server/protocol.py).
DISCONNECT = "llmmeter.disconnect"
