"""A Reconciliation as Markdown, JSON or CSV. Money is written exactly, as decimal strings."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import orjson

from proxy.export import csv_writer, spreadsheet_text
from proxy.mdtext import md_cell as _cell
from proxy.reconcile.model import Measure, Reconciliation, RequestDiff, Row
from proxy.reconcile.provider_cost import difference_pct

MD_REQUESTS = 200  # requests listed in Markdown; JSON and CSV list every one kept
CSV_COLUMNS = ("section", "date", "scope", "model", "tier", "upstream", "id", "measure", "llmmeter", "provider",
               "difference", "pct", "over_threshold", "requests", "estimated_requests", "unpriced_requests", "notes")


def render(rec: Reconciliation, fmt: str) -> str:
    if fmt == "json":
        return orjson.dumps(as_json(rec), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode()
    if fmt == "csv":
        return as_csv(rec)
    return as_markdown(rec)


def _pct_text(p: Decimal | None) -> str | None:
    """A percentage as computed, to 0.01 (never "-0.00")."""
    return None if p is None else str(abs(p) if p == 0 else p)


def _num(v: Decimal | int | None) -> str | None:
    if v is None:
        return None
    if isinstance(v, int):
        return str(v)
    if v == 0:
        return "0"
    text = format(v.normalize(), "f")
    return text


# --- JSON -----------------------------------------------------------------------------------
def as_json(rec: Reconciliation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "month": rec.month, "source": rec.source, "threshold_pct": _num(rec.threshold_pct),
        "rows_over_threshold": rec.exceeding, "notes": rec.notes,
        "rows": [_row_json(r) for r in rec.rows],
    }
    if rec.source == "provider_cost":
        out["compared_requests"] = rec.compared_requests
        out["requests"] = [_request_json(d) for d in rec.requests]
    return out


def _row_json(r: Row) -> dict[str, Any]:
    def side(pick: str) -> dict[str, Any]:
        return {m.name: _value(getattr(m, pick), m.name) for m in r.measures}

    return {"date": r.day.isoformat(), "scope": r.scope, "model": r.model, "tier": r.tier,
            "llmmeter": side("llmmeter"), "provider": side("provider"),
            "difference": {m.name: {"difference": _value(m.difference, m.name), "pct": _pct_text(m.pct)}
                           for m in r.measures},
            "requests": r.requests, "estimated_requests": r.estimated, "unpriced_requests": r.unpriced,
            "over_threshold": r.exceeds, "notes": r.notes}


def _value(v: Decimal | int | None, name: str) -> str | int | None:
    """Tokens as JSON integers, dollars as exact strings."""
    if v is None:
        return None
    return _num(v) if name == "cost_usd" else int(v)


def _request_json(d: RequestDiff) -> dict[str, Any]:
    return {"id": d.id, "start": d.start, "upstream": d.upstream, "model": d.model, "cost_usd": _num(d.cost_usd),
            "provider_cost_usd": _num(d.provider_cost_usd), "difference_usd": _num(d.difference),
            "pct": _pct_text(difference_pct(d))}


# --- CSV ------------------------------------------------------------------------------------
def as_csv(rec: Reconciliation) -> str:
    buf = io.StringIO()
    w = csv_writer(buf)
    w.writerow(CSV_COLUMNS)
    for r in rec.rows:
        notes = spreadsheet_text("; ".join(r.notes))
        for m in r.measures:
            w.writerow(["row", r.day.isoformat(), r.scope, spreadsheet_text(r.model), spreadsheet_text(r.tier), "",
                        "", m.name, _num(m.llmmeter), _num(m.provider) or "", _num(m.difference) or "",
                        _pct_text(m.pct) or "", "true" if m.exceeds(rec.threshold_pct) else "false", r.requests,
                        r.estimated, r.unpriced, notes])
    for d in rec.requests:
        w.writerow(["request", d.start, "request", spreadsheet_text(d.model), "", spreadsheet_text(d.upstream),
                    spreadsheet_text(d.id), "cost_usd", _num(d.cost_usd) or "", _num(d.provider_cost_usd),
                    _num(d.difference) or "", _pct_text(difference_pct(d)) or "", "", 1, 0,
                    1 if d.cost_usd is None else 0, ""])
    for note in rec.notes:
        w.writerow(["note", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", spreadsheet_text(note)])
    return buf.getvalue()


# --- Markdown -------------------------------------------------------------------------------
def as_markdown(rec: Reconciliation) -> str:
    lines = [f"# Reconciliation {rec.month}: llmmeter against {rec.source}", "",
             f"Threshold {_num(rec.threshold_pct)}% · rows over it: {rec.exceeding} of {len(rec.rows)}", ""]
    lines += [f"- {n}" for n in rec.notes]
    lines += ["", "| date | model | tier | measure | llmmeter | provider | difference | % | over | notes |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    if not rec.rows:
        lines.append("| | | | | | | | | | nothing on either side this month |")
    for r in rec.rows:
        shown = [m for m in r.measures if m.llmmeter or m.provider] or r.measures[:1]
        for i, m in enumerate(shown):
            note = "; ".join(r.notes) if i == 0 else ""
            lines.append("| " + " | ".join([
                r.day.isoformat() if i == 0 else "", _cell(r.model) if i == 0 else "", _cell(r.tier) if i == 0 else "",
                m.name, _shown(m.llmmeter, m.name), _shown(m.provider, m.name), _shown(m.difference, m.name),
                _pct(m), "**over**" if m.exceeds(rec.threshold_pct) else "", _cell(note)]) + " |")
    if rec.source == "provider_cost":
        lines += ["", f"## Requests whose cost differs ({len(rec.requests)} of {rec.compared_requests} compared)", ""]
        if rec.requests:
            lines += ["| start | id | upstream | model | llmmeter | provider | difference |",
                      "|---|---|---|---|---|---|---|"]
            for d in rec.requests[:MD_REQUESTS]:
                mine = "unpriced" if d.cost_usd is None else _shown(d.cost_usd, "cost_usd")
                lines.append("| " + " | ".join([d.start, _cell(d.id), _cell(d.upstream), _cell(d.model), mine,
                                                 _shown(d.provider_cost_usd, "cost_usd"),
                                                 _shown(d.difference, "cost_usd")]) + " |")
            if len(rec.requests) > MD_REQUESTS:
                lines.append(f"\n{len(rec.requests) - MD_REQUESTS} more in --format json or csv")
    return "\n".join(lines) + "\n"


def _shown(v: Decimal | int | None, name: str) -> str:
    if v is None:
        return "—"
    if name != "cost_usd":
        return f"{int(v):,}"
    sign, d = "-" if v < 0 else "", abs(Decimal(v)).normalize()
    if d.as_tuple().exponent > -2:  # type: ignore[operator]  # finite: an int exponent
        d = d.quantize(Decimal("0.01"))
    return f"{sign}${format(d, 'f')}"


def _pct(m: Measure) -> str:
    if m.provider is None:
        return "—"
    pct = m.pct
    return "∞" if pct is None else f"{_pct_text(pct)}%"
