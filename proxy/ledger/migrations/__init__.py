"""Numbered SQL migrations, applied in order and recorded in `schema_migrations`.

`NNN_name.sql` is one file both databases run. Where the dialects differ (a trigger is
SQL in SQLite and a plpgsql function in PostgreSQL) a version ships one file per dialect
instead, `NNN_name.sqlite.sql` and `NNN_name.postgresql.sql`, never beside a shared one.
The loader refuses a version that some dialect lacks, so version N means the same schema
on every backend and a ledger's `schema_migrations` reads the same wherever it lives.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources import files

DIALECTS = ("sqlite", "postgresql")
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+?)(?:\.(" + "|".join(DIALECTS) + r"))?\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load(dialect: str = "sqlite") -> list[Migration]:
    """Every shipped migration for `dialect`, by version; found through importlib.resources so installs work."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}")
    # version -> {dialect or None (shared): (name, sql)}
    found: dict[int, dict[str | None, tuple[str, str]]] = {}
    for entry in files(__package__ or __name__).iterdir():
        m = _NAME.match(entry.name)
        if not m:
            continue
        variants = found.setdefault(int(m.group(1)), {})
        if m.group(3) in variants:
            raise RuntimeError(f"two ledger migrations share version {m.group(1)}")
        variants[m.group(3)] = (m.group(2), entry.read_text(encoding="utf-8"))
    out = []
    for version, variants in sorted(found.items()):
        if len({name for name, _ in variants.values()}) != 1:
            raise RuntimeError(f"ledger migration {version:03d} has different names per dialect")
        if None in variants and len(variants) > 1:
            raise RuntimeError(f"ledger migration {version:03d} is both shared and per dialect")
        if None not in variants and set(variants) != set(DIALECTS):
            raise RuntimeError(f"ledger migration {version:03d} is missing for {set(DIALECTS) - set(variants)}")
        name, sql = variants.get(None) or variants[dialect]
        out.append(Migration(version, name, sql))
    return out


def unknown(applied: Iterable[int], shipped: Sequence[Migration]) -> list[int]:
    """Versions a ledger records that this build does not ship: a newer llmmeter migrated it.
    Writing to it anyway would skip what those versions keep (a rollup, a trigger's job)."""
    known = {m.version for m in shipped}
    return sorted(v for v in applied if v not in known)
