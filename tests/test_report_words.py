"""The report's plain-words lines and definitions, on numbers small enough to check by eye."""

from __future__ import annotations

from proxy.report.build import peak_to_offpeak, workload_summary
from proxy.report.model import Usage, WorkloadRow


def _row(workload: str, requests: int, share: float) -> WorkloadRow:
    return WorkloadRow(workload, 0, Usage(requests=requests), share)


def test_workload_summary_names_shares_of_calls_and_cost() -> None:
    rows = (_row("short", 92, 0.39), _row("medium", 0, 0.0), _row("long", 8, 0.61))
    assert workload_summary(rows) == ("short requests are 92% of calls and 39% of cost; "
                                      "long-document requests are 8% of calls and 61% of cost.")
    assert workload_summary(()) == "No metered requests this month."


def test_peak_to_offpeak_is_busiest_4_over_quietest_12() -> None:
    hours = [100] * 4 + [50] * 8 + [10] * 12
    assert peak_to_offpeak(hours) == 10.0
    assert peak_to_offpeak([5] * 12 + [0] * 12) == 0.0  # quiet hours all zero
