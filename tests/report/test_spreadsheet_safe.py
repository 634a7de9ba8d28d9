"""Every CSV llmmeter writes opens in a spreadsheet as text, never as a formula (SPEC "Ledger")."""

from __future__ import annotations

import csv
import io
import json

import pytest

from proxy.export import csv_writer, spreadsheet_text, write_export
from tests.ledger.helpers import full_record

HOSTILE = '=HYPERLINK("http://evil","x")'


@pytest.mark.parametrize("text", ["=1+1", "+x", "-x", "@x", "\tx", "\rx", HOSTILE])
def test_a_formula_start_gets_a_leading_quote(text: str) -> None:
    assert spreadsheet_text(text) == "'" + text


@pytest.mark.parametrize("text", ["", "plain", "kimi-k3.1-pro", "'=already", " =1", "x=1", "1e5"])
def test_other_text_is_left_alone(text: str) -> None:
    assert spreadsheet_text(text) == text


def test_a_carriage_return_inside_a_cell_cannot_start_a_row() -> None:
    out = io.StringIO()
    w = csv_writer(out)
    w.writerow(["a", "x\r=1+1", "b\nc"])
    w.writerow(["d", "e", "f"])
    assert out.getvalue() == 'a,"x\r=1+1","b\nc"\nd,e,f\n'
    assert list(csv.reader(io.StringIO(out.getvalue(), newline=""))) == [["a", "x\r=1+1", "b\nc"], ["d", "e", "f"]]


def _hostile_record() -> object:
    return full_record(1, id="-1", tenant="@x", model_requested=HOSTILE, model=HOSTILE, tag="+x", end_user="=1+1",
                       response_model="@SUM(A1)", upstream_request_id="\tid", workload="-w")


def test_export_csv_quotes_client_text_and_leaves_numbers() -> None:
    out = io.StringIO()
    assert write_export([_hostile_record()], "csv", out) == 1  # type: ignore[list-item]
    [row] = list(csv.DictReader(io.StringIO(out.getvalue(), newline="")))
    assert (row["id"], row["tenant"], row["model_requested"], row["model"], row["tag"], row["end_user"],
            row["response_model"], row["upstream_request_id"]) == (
        "'-1", "'@x", "'" + HOSTILE, "'" + HOSTILE, "'+x", "'=1+1", "'@SUM(A1)", "'\tid")
    assert row["cost_usd"] == "274.0000000001" and row["input_tokens"] == "30000001"
    assert row["start"] == "2026-11-03T14:05:09.124Z" and row["price_effective_from"] == "2026-10-23T00:00:00Z"


def test_export_jsonl_keeps_values_as_they_are() -> None:
    out = io.StringIO()
    write_export([_hostile_record()], "jsonl", out)  # type: ignore[list-item]
    row = json.loads(out.getvalue())
    assert (row["model"], row["end_user"], row["tenant"], row["tag"]) == (HOSTILE, "=1+1", "@x", "+x")


def test_export_appends_the_version_2_columns_exactly() -> None:
    """SPEC "Ledger": cache_write_1h_tokens, web_search_calls, price_band, provider_cost_usd, flags,
    appended in that order; provider cost an exact decimal like cost_usd, flags joined by `|`."""
    priced = full_record(1, provider_cost_units=2_740_000_000_123, flags=["output_from_total", "tier_fallback"])
    unpriced = full_record(2, cost_units=None, price_band=None, fee_units=None, provider_cost_units=None, flags=[])
    out = io.StringIO()
    assert write_export([priced, unpriced], "csv", out) == 2
    header, *_ = out.getvalue().splitlines()
    assert ",upstream_request_id,cache_write_1h_tokens,web_search_calls,price_band,provider_cost_usd,flags," in header
    assert header.endswith(",flags,request_count")  # version 4 appends the requests a row stands for
    first, second = csv.DictReader(io.StringIO(out.getvalue(), newline=""))
    assert (first["cache_write_1h_tokens"], first["web_search_calls"], first["price_band"],
            first["provider_cost_usd"], first["flags"]) == (
        "7", "3", "200000", "274.0000000123", "output_from_total|tier_fallback")
    assert (second["cost_usd"], second["price_band"], second["provider_cost_usd"], second["flags"]) == ("", "", "", "")
    out = io.StringIO()
    write_export([priced, unpriced], "jsonl", out)
    a, b = (json.loads(line) for line in out.getvalue().splitlines())
    assert (a["cache_write_1h_tokens"], a["web_search_calls"], a["price_band"], a["provider_cost_usd"], a["flags"]) \
        == (7, 3, 200000, "274.0000000123", "output_from_total|tier_fallback")
    assert (b["price_band"], b["provider_cost_usd"], b["flags"]) == (None, None, "")
