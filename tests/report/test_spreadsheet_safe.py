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
