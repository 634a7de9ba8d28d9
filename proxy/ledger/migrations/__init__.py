"""Numbered SQL migrations (`NNN_name.sql`), applied in order and recorded in `schema_migrations`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files

_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load() -> list[Migration]:
    """Every shipped migration, by version; found through importlib.resources so installs work."""
    found: list[Migration] = []
    for entry in files(__package__ or __name__).iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two ledger migrations share a version: {versions}")
    return found
