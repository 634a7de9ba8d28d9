"""SECURITY.md's promises name the tests that show them, and those tests exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
SECURITY = (ROOT / "SECURITY.md").read_text()
REFERENCE = re.compile(r"`(tests/[\w/]+(?:\.py)?/?)(?:::(\w+))?`")


def _section(title: str) -> str:
    start = SECURITY.index(f"## {title}\n")
    end = SECURITY.find("\n## ", start + 1)
    return SECURITY[start:end if end != -1 else None]


def _bullets(text: str) -> list[str]:
    return [b.strip() for b in re.split(r"\n(?=- \*\*)", text) if b.startswith("- **")]


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_named_in_security_md_exists() -> None:
    refs = REFERENCE.findall(SECURITY)
    assert refs
    for path, name in refs:
        target = ROOT / path
        assert target.exists(), path
        if name:
            assert name in _defined(target), f"{path}::{name}"


def test_every_promise_about_the_network_and_budgets_names_its_test() -> None:
    promises = _bullets(_section("What it promises about the network"))
    promises += [b for b in _bullets(_section("What it promises")) if "budget" in b.lower()]
    assert len(promises) > 10
    missing = [p.split("**")[1] for p in promises if not REFERENCE.search(p)]
    assert not missing, missing


def test_budgets_are_not_called_alert_only() -> None:
    """They are enforced since version 3 (`mode = "enforce"`): SECURITY.md must not say otherwise."""
    assert "alerts only" not in SECURITY and "alert-only" not in SECURITY
    assert "budget enforcement" not in _section("What it does not do").lower()
