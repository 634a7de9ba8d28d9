"""`llmmeter export --format focus`: the ledger as FOCUS 1.2 cost and usage rows (docs/report.md, "FOCUS")."""

from proxy.focus.columns import COLUMNS, Column
from proxy.focus.rows import FocusRow, focus_rows
from proxy.focus.write import write_focus

__all__ = ["COLUMNS", "Column", "FocusRow", "focus_rows", "write_focus"]
