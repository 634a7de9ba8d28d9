"""The real wire captures beside the checkout, in ../shared/fixtures (never copied into the project).

They are read where they are; a checkout without them skips these tests loudly (the reason
says SKIPPED, NOT PASSED), whatever LLMMETER_STRICT_TESTS says: they are data that travels
with the project's issues, not a system part that `make test` can install.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
RECORDINGS = SHARED / "recordings" / "bodies"
LLAMA_CPP = SHARED / "llama-cpp-0.3.36"


def shared_fixture(path: Path) -> Path:
    """`path` (under SHARED), or a loud skip when the captures are not beside the checkout."""
    if not path.exists():
        pytest.skip(f"SKIPPED, NOT PASSED: the real wire captures are not at {path} "
                    "(a checkout of llmmeter with ../shared/fixtures beside it has them)")
    return path
