"""`llmmeter report`: the monthly usage report and the self-hosting decision (SPEC "Monthly report")."""

from proxy.report.build import ReportInput, build_report, month_range
from proxy.report.render import render

__all__ = ["ReportInput", "build_report", "month_range", "render"]
