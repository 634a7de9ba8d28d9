"""Who may read /metrics (SPEC "Version 4 additions" → "Metrics auth").

/metrics carries every tenant's cost and budget. With tenants' keys configured, tenants are
kept apart on /v1, so their spend must not be open to whoever reaches the port: it needs
`server.metrics_token`, unless /metrics is served on a loopback address only: llmmeter's own
(`server.host`) or, with `server.metrics_bind`, a listener of its own that serves nothing else. Without keys
there is nobody to keep apart, and /metrics stays open by default.
"""

from __future__ import annotations

from proxy.errors import ConfigError
from proxy.loopback import is_loopback
from proxy.settings import Settings


def check_metrics_exposure(s: Settings) -> None:
    """Refuse settings that would serve every tenant's spend without a token off this machine."""
    if not s.keys_required or s.metrics_token is not None:
        return
    if s.metrics_bind is not None:
        host = s.metrics_bind[0]
        if not is_loopback(host):
            raise ConfigError(
                f"[[tenant]] keys are configured and server.metrics_bind listens on {host}, so /metrics would "
                "show every tenant's cost and budget to anyone who reaches that port: set server.metrics_token "
                "(or LLMMETER_METRICS_TOKEN) and give Prometheus the token, or bind /metrics to a loopback "
                "address (server.metrics_bind = \"127.0.0.1:9464\")")
        return
    if not is_loopback(s.host):
        raise ConfigError(
            f"[[tenant]] keys are configured and llmmeter would listen on {s.host}, so /metrics would show "
            "every tenant's cost and budget to anyone who reaches the port: set server.metrics_token "
            "(or LLMMETER_METRICS_TOKEN) and give Prometheus the token, serve /metrics on a loopback "
            "listener of its own (server.metrics_bind = \"127.0.0.1:9464\"), or listen on a loopback "
            "address only (server.host = \"127.0.0.1\", --host 127.0.0.1)")
