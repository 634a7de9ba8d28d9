"""`python -m proxy.healthcheck`: the container's HEALTHCHECK. It asks `/readyz` at the address
`serve` listens on, read from the same settings (config file, then environment), so a mounted
config's `[server] port` is probed where it is in force. Exit 0 when ready, 1 otherwise."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from proxy import settings as config
from proxy.errors import ConfigError

# A wildcard address is not one to connect to: the same host's loopback reaches it.
_LOOPBACK = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}


def readyz_url(s: config.Settings) -> str:
    host = _LOOPBACK.get(s.host, f"[{s.host}]" if ":" in s.host else s.host)
    return f"http://{host}:{s.port}/readyz"


def main() -> int:
    try:
        url = readyz_url(config.load(config.default_config_path()))
        with urllib.request.urlopen(url, timeout=2) as r:
            return 0 if r.status == 200 else 1
    except (ConfigError, OSError, urllib.error.URLError) as e:
        print(f"not ready: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
