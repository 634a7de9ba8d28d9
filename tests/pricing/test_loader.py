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
    (('input = "2.00"', 'input = "2.00000000001"'), 6, "more than 10 decimal places"),
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


# Version 2: 1-hour cache writes, per-call fees, inference_geo and long-context bands.
V2 = GOOD + """\
cache_write_1h = "4.00"
web_search_per_1k = "10.00"
inference_geo = "us"

[[price.band]]
above_input_tokens = 200000
input = "4.00"
output = "15.00"

[[price.band]]
above_input_tokens = 1000000
cache_write_1h = "8.00"
"""


def test_a_version_2_entry_loads_with_its_bands(tmp_path: Path) -> None:
    [p] = load_dir(table(tmp_path, V2))
    assert (p.cache_write_1h, p.web_search_per_1k, p.inference_geo) == (Decimal(4), Decimal(10), "us")
    low, high = p.bands
    assert (low.above_input_tokens, low.input, low.output, low.cache_read, low.line) == (
        200000, Decimal(4), Decimal(15), None, 15)
    assert (high.above_input_tokens, high.cache_write_1h, high.input, high.line) == (1000000, Decimal(8), None, 20)


def test_version_1_entries_have_no_version_2_prices(tmp_path: Path) -> None:
    [p] = load_dir(table(tmp_path, GOOD))
    assert (p.cache_write_1h, p.web_search_per_1k, p.inference_geo, p.bands) == (None, None, None, ())


@pytest.mark.parametrize(("change", "line", "words"), [
    (('cache_write_1h = "4.00"', 'cache_write_1h = 4.0'), 11, "cache_write_1h must be a decimal string"),
    (('cache_write_1h = "4.00"', 'cache_write_1h = "-4"'), 11, "cache_write_1h '-4' is negative"),
    (('web_search_per_1k = "10.00"', 'web_search_per_1k = "10.00000000001"'), 12, "more than 10 decimal places"),
    (('web_search_per_1k = "10.00"', 'web_search_per_1k = "1000001"'), 12,
     "above the ceiling of 1,000,000 USD per 1,000 calls"),
    (('inference_geo = "us"', 'inference_geo = "US East"'), 13, "inference_geo 'US East' must be lower-case"),
    (('inference_geo = "us"', 'inference_geo = ""'), 13, "inference_geo must be a non-empty string"),
    # The bands: each error on the band's own line.
    (('above_input_tokens = 200000', 'above_input_tokens = 0'), 16, "from 1 to 4,000,000,000, not 0"),
    (('above_input_tokens = 200000', 'above_input_tokens = "200000"'), 16, "whole number of tokens"),
    (('above_input_tokens = 200000', 'above_input_tokens = 2e5'), 16, "whole number of tokens"),
    (('above_input_tokens = 200000', 'above_input_tokens = true'), 16, "whole number of tokens"),
    (('above_input_tokens = 200000', 'above_input_tokens = 4000000001'), 16, "not 4000000001"),
    (('above_input_tokens = 200000\n', ''), 15, "[[price.band]] is missing 'above_input_tokens'"),
    (('above_input_tokens = 1000000', 'above_input_tokens = 200000'), 21,
     "strictly ascending: above_input_tokens 200000 follows 200000 (at {file}:15)"),
    (('above_input_tokens = 1000000', 'above_input_tokens = 100000'), 21, "100000 follows 200000"),
    (('output = "15.00"', 'output = "15.00"\nweb_search_per_1k = "1"'), 19,
     "unknown key 'web_search_per_1k' in [[price.band]]"),
    (('output = "15.00"', 'output = "15.00"\ncolour = "red"'), 19, "unknown key 'colour' in [[price.band]]"),
    (('output = "15.00"', 'output = 15.0'), 18, "output must be a decimal string"),
    (('input = "4.00"\noutput = "15.00"', 'input = "4.00000000001"'), 17, "input '4.00000000001' has more than 10"),
    (('cache_write_1h = "8.00"', 'cache_write_1h = "1000000.5"'), 22, "above the ceiling"),
    (('cache_write_1h = "8.00"\n', ''), 20, "above 1000000 gives no price"),
    (('[[price.band]]\nabove_input_tokens = 200000', '[price.band]\nabove_input_tokens = 200000'), 15,
     "band must be an array of tables: write [[price.band]]"),
])
def test_each_version_2_fault_is_named_with_file_and_line(tmp_path: Path, change: tuple[str, str], line: int,
                                                          words: str) -> None:
    old, new = change
    assert old in V2
    text = V2.replace(old, new, 1)
    if change[1].startswith("[price.band]"):
        text = text[:text.index("\n[[price.band]]")] + "\n"  # a table, then nothing more for it
    file = tmp_path / "t.toml"
    err = one_error(tmp_path, text)
    assert err.startswith(f"{file}:{line}: "), err
    assert words.format(file=file) in err, err


def test_band_errors_point_into_the_right_entry(tmp_path: Path) -> None:
    second = V2.replace('tier = "standard"', 'tier = "batch"').replace('match = ["m", "vendor/m"]\n', "")
    text = GOOD + "\n" + second.replace('input = "4.00"', 'input = "x"')
    err = one_error(tmp_path, text)
    # GOOD is 10 lines, a blank one, then the second entry (V2 less its match line): its first
    # band's input is on that entry's line 16, the file's 27.
    assert err.startswith(f"{tmp_path / 't.toml'}:27: input 'x' is not a decimal number"), err


def test_the_same_entry_in_another_geo_is_not_a_duplicate_but_twice_in_one_is(tmp_path: Path) -> None:
    global_ = V2.replace('inference_geo = "us"\n', "").replace('match = ["m", "vendor/m"]\n', "")
    assert len(load_dir(table(tmp_path, V2 + "\n" + global_))) == 2
    again = V2.replace('match = ["m", "vendor/m"]\n', "")
    [err] = check_dir(table(tmp_path, V2 + "\n" + again))
    assert ":24: duplicate entry for model 'm' tier 'standard' inference_geo 'us'" in err


def test_tier_names_are_free(tmp_path: Path) -> None:
    tiers = ("flex", "priority", "batch", "scale.v2")
    text = "\n".join(GOOD.replace('tier = "standard"', f'tier = "{t}"').replace('match = ["m", "vendor/m"]\n', "")
                     for t in tiers)
    assert {p.tier for p in load_dir(table(tmp_path, text))} == set(tiers)


def test_prices_check_reports_band_and_fee_errors_with_file_and_line(tmp_path: Path) -> None:
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    bad = V2.replace('web_search_per_1k = "10.00"', "web_search_per_1k = 10").replace(
        "above_input_tokens = 1000000", "above_input_tokens = 1000")
    table(tmp_path, bad)
    done = subprocess.run([sys.executable, "-m", "proxy", "prices", "check", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, cwd=root)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    f = tmp_path / "t.toml"
    assert done.stderr.splitlines() == [
        f'{f}:12: web_search_per_1k must be a decimal string such as "2.00", not int 10',
        f"{f}:21: bands must be strictly ascending: above_input_tokens 1000 follows 200000 (at {f}:15)",
        f"{tmp_path} (given on the command line): 2 errors",
    ]
    table(tmp_path, V2)
    done = subprocess.run([sys.executable, "-m", "proxy", "prices", "check", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, cwd=root)
    assert done.returncode == 0 and "1 price entries, all valid" in done.stdout, done.stderr


def test_globs_load_and_identical_globs_for_two_models_are_an_error(tmp_path: Path) -> None:
    glob = GOOD.replace('match = ["m", "vendor/m"]', 'match = ["m", "vendor/m-*"]')
    [p] = load_dir(table(tmp_path, glob))
    assert p.match == ("m", "vendor/m-*")
    # Another model claiming the same glob (in any case) at the same tier and date: one name, two models.
    other = glob.replace('model = "m"', 'model = "n"').replace('"m", "vendor/m-*"', '"n", "Vendor/M-*"')
    errors = check_dir(table(tmp_path, glob + "\n" + other))
    assert errors == [f"{tmp_path / 't.toml'}:12: glob 'Vendor/M-*' already means 'm' (at {tmp_path / 't.toml'}:1);"
                      f" a name can mean one model only"]
    # Overlapping but different globs cannot be decided at load time: the longer one wins when a name comes.
    overlap = other.replace('"Vendor/M-*"', '"vendor/m-pro*"')
    assert check_dir(table(tmp_path, glob + "\n" + overlap)) == []
