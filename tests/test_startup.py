"""What `serve` says it will do: one line each, nothing secret."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.settings import Budget, Settings, Tenant, Upstream
from proxy.startup import startup_lines, without_credentials


def test_the_startup_lines_name_everything_and_reveal_nothing() -> None:
    settings = Settings(
        host="0.0.0.0", port=9090, workers=2, metrics_token="mt-secret",
        ledger_url="postgresql://bob:s3cret@db.internal/llmmeter",
        upstreams=(Upstream("moonshot", "https://user:pw@api.moonshot.ai/v1", api_key_env="MOONSHOT_API_KEY",
                            models=("kimi-*",), api_key="sk-live-key", proxy="http://me:pw2@egress:3128"),
                   Upstream("local", "http://127.0.0.1:8000/v1")),
        tenants=(Tenant("search", ("ab" * 32,)),))
    book = PriceBook(load_dir(default_tables_dir()))
    lines = list(startup_lines(settings, book, Path("/data/journal"), datetime(2026, 12, 1, tzinfo=UTC)))
    text = "\n".join(lines)
    assert lines[0] == "listening on http://0.0.0.0:9090, 2 workers"
    assert "upstream moonshot: https://api.moonshot.ai/v1, via http://egress:3128 for kimi-*, key from " \
           "MOONSHOT_API_KEY" in text
    assert "upstream local: http://127.0.0.1:8000/v1 for every model no other upstream claims" in text
    assert "ledger postgresql://bob@db.internal/llmmeter, journal in /data/journal" in text
    assert "prices: " in text and "entries in force, newest effective from 2026-" in text
    assert "proxy keys required (1 tenants); budgets off; metrics token on" in text
    for secret in ("s3cret", "pw@", "pw2", "sk-live-key", "mt-secret", "user:"):
        assert secret not in text, secret


def test_without_credentials() -> None:
    assert without_credentials("http://a:b@h:1/p?q=1") == "http://h:1/p"
    assert without_credentials("http://[::1]:8080/v1") == "http://[::1]:8080/v1"


def test_the_startup_line_names_enforced_budgets_and_counts_alert_only_ones() -> None:
    settings = Settings(budgets=(Budget("team-monthly", Decimal(5000), mode="enforce"),
                                 Budget("all-daily", Decimal(300), period="day")),
                        monthly_budget_usd=Decimal(100))
    book = PriceBook(load_dir(default_tables_dir()))
    text = "\n".join(startup_lines(settings, book, Path("/data/journal"), datetime(2026, 12, 1, tzinfo=UTC)))
    assert "budgets 1 enforced (team-monthly), 2 alert only; " in text
