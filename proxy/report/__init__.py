"""`llmmeter report`: the monthly usage report and the self-hosting decision (SPEC "Monthly report").

`build_report` reads the ledger once into a typed `Report`; `render` writes it as md, json,
csv or html (proxy/report/formats/), each from that one Report.
"""

from proxy.report.build import ReportInput, build_report, month_range
from proxy.report.formats import render
from proxy.report.model import Report

__all__ = ["Report", "ReportInput", "build_report", "month_range", "render"]
