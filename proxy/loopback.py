"""Whether a host name or address is this machine (a loopback address, or `localhost`)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.strip().lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False
