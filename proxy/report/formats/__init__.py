"""The report's formats, each rendered from one built `Report`."""

from __future__ import annotations

from collections.abc import Callable

from proxy.errors import ConfigError
from proxy.report.formats.csv import render_csv
from proxy.report.formats.html import render_html
from proxy.report.formats.json import render_json
from proxy.report.formats.md import render_md
from proxy.report.model import Report

RENDERERS: dict[str, Callable[[Report], str]] = {
    "md": render_md, "json": render_json, "csv": render_csv, "html": render_html}


def render(report: Report, fmt: str) -> str:
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise ConfigError(f"report format {fmt!r} is not available (md, json, csv or html)") from None
    return renderer(report)
