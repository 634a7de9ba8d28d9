"""The typed Report writes the JSON and CSV the dict-built report wrote, byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.report import Report, render
from tests.report.conftest import VARIANTS

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_json_is_byte_for_byte_what_it_was(build: Callable[[str], Report], variant: str) -> None:
    assert render(build(variant), "json") == (DATA / f"{variant}.json").read_text()


@pytest.mark.parametrize("variant", ["complete-utc", "running-ny-agents"])
def test_csv_rows_are_what_they_were(build: Callable[[str], Report], variant: str) -> None:
    # No client text here starts a formula, so the spreadsheet rule changes nothing.
    assert render(build(variant), "csv") == (DATA / f"{variant}.csv").read_text()
