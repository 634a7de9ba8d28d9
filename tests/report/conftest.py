"""A ledger seeded by bench/seed_ledger.py (deterministic for its seed), and reports built from it in-process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.ledger.store import Store, open_store
from proxy.report import Report, ReportInput, build_report
from proxy.settings import SelfHost

ROOT = Path(__file__).resolve().parents[2]
SEED_ROWS, SEED_MONTH = 3000, "2026-11"

# The report variants the JSON and CSV goldens were written for: (name, ReportInput fields).
VARIANTS: dict[str, dict[str, Any]] = {
    "complete-utc": {"month": "2026-11", "tz": "UTC", "now": datetime(2026, 12, 15, tzinfo=UTC),
                     "reprice_at": datetime(2026, 11, 15, tzinfo=UTC)},
    "running-ny-agents": {"month": "2026-11", "tz": "America/New_York",
                          "now": datetime(2026, 11, 17, 9, 30, tzinfo=UTC), "tenant": "agents"},
    "kolkata-frac-reprice": {"month": "2026-11", "tz": "Asia/Kolkata", "now": datetime(2027, 1, 1, tzinfo=UTC),
                             "reprice_at": datetime(2026, 11, 20, 1, 2, 3, 500000, tzinfo=UTC)},
    "empty-feb": {"month": "2026-02", "tz": "America/Sao_Paulo", "now": datetime(2026, 12, 15, tzinfo=UTC)},
    "selfhosted": {"month": "2026-11", "tz": "UTC", "now": datetime(2026, 12, 15, tzinfo=UTC),
                   "self_hosted_upstreams": frozenset({"moonshot"})},
}


def seed(db: Path, rows: int = SEED_ROWS, month: str = SEED_MONTH) -> str:
    url = f"sqlite:///{db}"
    subprocess.run([sys.executable, str(ROOT / "bench" / "seed_ledger.py"), "--rows", str(rows), "--month", month,
                    "--db", url], check=True, capture_output=True, text=True, timeout=120)
    return url


@pytest.fixture(scope="session")
def seeded_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return open_store(seed(tmp_path_factory.mktemp("seeded") / "ledger.db"), read_only=True)


@pytest.fixture(scope="session")
def build(seeded_store: Store) -> Callable[[str], Report]:
    """build(variant) -> the Report of one of VARIANTS over the seeded ledger."""
    book = PriceBook(load_dir(default_tables_dir()))

    def make(variant: str) -> Report:
        v = dict(VARIANTS[variant])
        tz = ZoneInfo(v.pop("tz"))
        return build_report(seeded_store, ReportInput(tz=tz, book=book, selfhost=SelfHost(),
                                                      workload_bounds=(4096, 32768, 131072), **v))
    return make
