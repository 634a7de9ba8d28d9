"""The loader rejects every broken table with the file, the line and the fault."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from pricing import PriceTableError, check_dir, default_tables_dir, load_dir

GOOD = """\
[[price]]
model = "m"
match = ["m", "vendor/m"]
tier = "standard"
effective_from = 2026-10-23T00:00:00Z
input = "2.00"
output = "10.00"
cache_read = "0.20"
cache_write = "2.00"
source = "test"
"""


def table(tmp_path: Path, text: str, name: str = "t.toml") -> Path:
    (tmp_path / name).write_text(text)
    return tmp_path


def one_error(tmp_path: Path, text: str) -> str:
    errors = check_dir(table(tmp_path, text))
    assert len(errors) == 1, errors
    return errors[0]


def test_shipped_tables_are_valid_and_have_kimi_standard_and_highspeed() -> None:
    prices = load_dir(default_tables_dir())
    kimi = {p.tier: p for p in prices if p.model == "kimi-k3.1-pro"}
    assert set(kimi) == {"standard", "highspeed"}
    s, h = kimi["standard"], kimi["highspeed"]
    assert (s.input, s.output, s.cache_read, s.cache_write) == tuple(map(Decimal, ("2", "10", "0.2", "2")))
    assert (h.input, h.output, h.cache_read, h.cache_write) == tuple(map(Decimal, ("4", "20", "0.2", "4")))
    assert s.effective_from == datetime(2026, 10, 23, tzinfo=UTC)
    assert all(p.source for p in prices)


def test_good_table_loads(tmp_path: Path) -> None:
    [p] = load_dir(table(tmp_path, GOOD))
    assert p.match == ("m", "vendor/m") and p.input == Decimal("2.00") and p.line == 1


@pytest.mark.parametrize(("change", "line", "words"), [
    (('input = "2.00"', 'input = 2.00'), 6, "must be a decimal string"),
    (('input = "2.00"', 'input = "2.00001"'), 6, "more than 4 decimal places"),
    (('input = "2.00"', 'input = "-1"'), 6, "negative"),
    (('input = "2.00"', 'input = "two"'), 6, "not a decimal number"),
    (('input = "2.00"', 'input = "NaN"'), 6, "not a finite number"),
    (('cache_write = "2.00"\n', ''), 1, "missing 'cache_write'"),
    (('source = "test"', 'source = "test"\ncolour = "red"'), 11, "unknown key 'colour'"),
    (('2026-10-23T00:00:00Z', '2026-10-23T00:00:00'), 5, "no UTC offset"),
    (('2026-10-23T00:00:00Z', '2026-10-23'), 5, "time with offset"),
    (('effective_from = 2026-10-23T00:00:00Z', 'effective_from = "yesterday"'), 5, "TOML datetime"),
    (('source = "test"', 'source = "test"\ncurrency = "EUR"'), 11, "only USD"),
    (('tier = "standard"', 'tier = "Standard Plus"'), 4, "lower-case"),
    (('match = ["m", "vendor/m"]', 'match = []'), 3, "non-empty list"),
    (('model = "m"', 'model = ""'), 2, "non-empty string"),
])
def test_each_fault_is_named_with_file_and_line(tmp_path: Path, change: tuple[str, str], line: int,
                                                words: str) -> None:
    old, new = change
    assert old in GOOD
    err = one_error(tmp_path, GOOD.replace(old, new, 1))
    assert err.startswith(f"{tmp_path / 't.toml'}:{line}: "), err
    assert words in err.replace("is not supported: price tables are in USD", "only USD")


def test_errors_point_at_the_right_entry(tmp_path: Path) -> None:
    second = GOOD.replace('tier = "standard"', 'tier = "highspeed"').replace('match = ["m", "vendor/m"]\n', "")
    text = GOOD + "\n" + second.replace('output = "10.00"', "output = 10")
    err = one_error(tmp_path, text)
    assert err.startswith(f"{tmp_path / 't.toml'}:17: ") and "output" in err


def test_duplicates_across_files_are_rejected(tmp_path: Path) -> None:
    table(tmp_path, GOOD, "a.toml")
    table(tmp_path, GOOD.replace('match = ["m", "vendor/m"]\n', ""), "b.toml")
    [err] = check_dir(tmp_path)
    assert "b.toml:1: duplicate entry for model 'm' tier 'standard'" in err and "a.toml:1" in err
    with pytest.raises(PriceTableError) as e:
        load_dir(tmp_path)
    assert e.value.errors == [err]


def test_same_entry_later_date_is_a_new_price_not_a_duplicate(tmp_path: Path) -> None:
    later = GOOD.replace("2026-10-23", "2026-12-01").replace('"2.00"', '"1.50"', 1)
    assert len(load_dir(table(tmp_path, GOOD + "\n" + later))) == 2


def test_a_name_that_means_two_models_is_rejected(tmp_path: Path) -> None:
    other = GOOD.replace('model = "m"', 'model = "n"')
    errors = check_dir(table(tmp_path, GOOD + "\n" + other))
    assert any("'vendor/m' already means 'm'" in e for e in errors), errors


def test_invalid_toml_and_unknown_top_level_keys(tmp_path: Path) -> None:
    err = one_error(tmp_path, GOOD + "\n[[price]\n")
    assert ":12: not valid TOML" in err
    err = one_error(tmp_path, "title = 'x'\n" + GOOD)
    assert err.endswith("unknown top-level key 'title' (only [[price]])") and ":1:" in err


def test_empty_or_missing_directory(tmp_path: Path) -> None:
    assert "no price tables" in check_dir(tmp_path)[0]
    assert "not a directory" in check_dir(tmp_path / "nope")[0]
