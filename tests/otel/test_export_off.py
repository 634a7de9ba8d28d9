"""With `[otel]` unset llmmeter loads no OpenTelemetry SDK: export off costs nothing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.strict import require

PROBE = """
import sys
from proxy.app import create_app
from proxy.settings import Otel, Settings
app = create_app(Settings(ledger_url="sqlite:///{db}", otel=Otel(endpoint={endpoint})))
print(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")) != [])
"""


def sdk_loaded(tmp_path: Path, endpoint: str | None) -> bool:
    code = PROBE.format(db=tmp_path / "ledger.db", endpoint=repr(endpoint))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


def test_no_sdk_is_imported_while_export_is_off(tmp_path: Path) -> None:
    assert not sdk_loaded(tmp_path, None)


def test_the_probe_sees_the_sdk_once_export_is_on(tmp_path: Path) -> None:
    require(importlib.util.find_spec("opentelemetry.sdk") is not None,
            "the otel extra is not installed (pip install 'llmmeter[otel]')")
    assert sdk_loaded(tmp_path, "http://127.0.0.1:9")


BLOCKED = """
import sys
from importlib.abc import MetaPathFinder

class NoSDK(MetaPathFinder):  # as in an environment without the otel extra
    def find_spec(self, name, path, target=None):
        if name.startswith("opentelemetry.sdk"):
            raise ImportError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoSDK())
from proxy.app import create_app
from proxy.errors import ConfigError
from proxy.settings import Otel, Settings
try:
    create_app(Settings(ledger_url="sqlite:///{db}", otel=Otel(endpoint="http://127.0.0.1:9")))
except ConfigError as e:
    print(e)
"""


def test_export_on_without_the_extra_is_a_clear_configuration_error(tmp_path: Path) -> None:
    code = BLOCKED.replace("{db}", str(tmp_path / "ledger.db"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr
    assert "[otel] endpoint is set but the OpenTelemetry SDK cannot be loaded" in out.stdout
    assert "pip install 'llmmeter[otel]'" in out.stdout
