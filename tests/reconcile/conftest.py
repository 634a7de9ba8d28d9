"""A local stand-in for the providers' admin APIs (127.0.0.1 only), a seeded ledger, and a config."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from proxy.ledger.record import Record
from tests.ledger.helpers import written

FIXTURES = Path(__file__).parent / "fixtures"
KEY = "sk-admin-TESTSECRET-9f8e7d6c5b4a"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@dataclass
class Seen:
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]


@dataclass
class FakeProvider:
    """Answers GET {path} with pages in order: the first without `page`, then one per cursor.
    `status` makes every answer that status with `body`."""

    url: str = ""
    routes: dict[str, list[bytes]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    status: int = 200
    body: bytes = b""

    def answer(self, path: str, query: list[tuple[str, str]], headers: dict[str, str]) -> tuple[int, bytes]:
        self.seen.append(Seen(path, query, headers))
        if self.status != 200:
            return self.status, self.body
        pages = self.routes.get(path)
        if pages is None:
            return 404, b'{"error": {"message": "no such path"}}'
        cursor = dict(query).get("page")
        if cursor is None:
            return 200, pages[0]
        for i, page in enumerate(pages[:-1]):
            if json.loads(page).get("next_page") == cursor:
                return 200, pages[i + 1]
        return 400, b'{"error": {"message": "unknown page cursor"}}'


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            status, body = fake.answer(parts.path, parse_qsl(parts.query, keep_blank_values=True),
                                       {k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


def seed(url: str, records: list[Record]) -> None:
    written(url, records)


def write_config(path: Path, db_url: str, base_url: str, **extra: str) -> Path:
    lines = ["[ledger]", f'url = "{db_url}"', "",
             "[reconcile.openai]", 'admin_key_env = "TEST_OPENAI_ADMIN"', f'base_url = "{base_url}"',
             extra.get("openai", ""), "",
             "[reconcile.anthropic]", 'admin_key_env = "TEST_ANTHROPIC_ADMIN"', f'base_url = "{base_url}"',
             extra.get("anthropic", ""), ""]
    path.write_text("\n".join(lines))
    return path
