"""The documentation site keeps identifiers in its tables whole: the configuration page's table
broke `max_connections_per_tenant` mid-word under the theme's own CSS. Checked on the built site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_table_code_is_never_broken_mid_word(tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=ROOT,
                   check=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    page = (site / "configuration" / "index.html").read_text()
    sheets = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page)
    css = "".join((site / "configuration" / href).resolve().read_text() for href in sheets
                  if not href.startswith("http") and "extra" in href)
    rule = re.search(r"\.md-typeset table:not\(\[class\]\) code\s*\{([^}]*)\}", css)
    assert rule is not None, sheets
    assert "white-space: nowrap" in rule.group(1) and "word-break: normal" in rule.group(1)
