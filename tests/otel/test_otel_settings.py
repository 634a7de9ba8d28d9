"""`[otel]` (SPEC "Version 4 additions", OpenTelemetry): off by default, every key checked."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.errors import ConfigError
from proxy.settings import Otel, Settings, load
from proxy.startup import startup_lines


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmmeter.toml"
    path.write_text(text)
    return path


def test_off_by_default(tmp_path: Path) -> None:
    s = load(write(tmp_path, "[server]\nport = 9090\n"), env={})
    assert s.otel == Otel() and not s.otel.enabled
    assert (s.otel.service_name, s.otel.sample_ratio, s.otel.queue_size) == ("llmmeter", 1.0, 2048)


def test_every_key_loads_and_the_headers_stay_out_of_repr(tmp_path: Path) -> None:
    s = load(write(tmp_path, '[otel]\nendpoint = "http://collector:4318"\n'
                             'headers = { "X-Api-Key" = "secret-value" }\nservice_name = "gateway"\n'
                             'sample_ratio = 0.25\nqueue_size = 100\n'), env={})
    assert s.otel == Otel("http://collector:4318", (("x-api-key", "secret-value"),), "gateway", 0.25, 100)
    assert s.otel.enabled
    assert "secret-value" not in repr(s)


@pytest.mark.parametrize(("text", "line", "words"), [
    ('[otel]\nendpoint = "collector:4318"\n', 2, "endpoint must be an http:// or https:// URL"),
    ("[otel]\nsample_ratio = 1.5\n", 2, "sample_ratio must be a number from 0 to 1"),
    ("[otel]\nsample_ratio = nan\n", 2, "sample_ratio must be a number from 0 to 1"),
    ("[otel]\nqueue_size = 0\n", 2, "queue_size must be a whole number from 1"),
    ('[otel]\nheaders = "x-api-key=1"\n', 2, "headers must be a table of strings"),
    ('[otel]\nheaders = { "bad name" = "v" }\n', 2, "'bad name' must be a header name"),
    ('[otel]\nheaders = { "x" = "a\\nb" }\n', 2, "'x' must be a header name with a string value"),
    ('[otel]\nprotocol = "grpc"\n', 2, "unknown key 'protocol' in [otel]"),
])
def test_bad_otel_settings_name_file_and_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load(path, env={})
    assert words in str(e.value)
    assert f"{path}:{line}" in str(e.value)


def test_serve_names_the_export_at_start_and_never_its_keys() -> None:
    book = PriceBook(load_dir(default_tables_dir()))
    at = datetime(2026, 12, 1, tzinfo=UTC)
    assert not any("otel" in line for line in startup_lines(Settings(), book, Path("/j"), at))
    on = Settings(otel=Otel("https://u:pw@collector:4318", (("x-api-key", "k-secret"),), "gw", 0.25, 100))
    text = "\n".join(startup_lines(on, book, Path("/j"), at))
    assert "otel: spans and GenAI metrics to https://collector:4318 as gw, sampling 0.25, queue 100, " \
           "headers x-api-key" in text
    assert "k-secret" not in text and "pw" not in text
