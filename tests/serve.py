"""Runs a real `llmmeter serve` subprocess on a free 127.0.0.1 port for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families
from psycopg.rows import dict_row


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(proc: subprocess.Popen[bytes], url: str, name: str, output: Callable[[], str],
               timeout: float) -> None:
    """Poll `url` until it answers 200; fail with the process's output if it exits or stalls."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{output()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{name} not ready in {timeout} s:\n{output()}")


class Served:
    """One llmmeter process; `db_url` is its ledger: `db`, its own SQLite file, unless given one."""

    def __init__(self, tmp: Path, upstream: str | None = None, config: str | None = None,
                 env: Mapping[str, str] | None = None, args: tuple[str, ...] = (), db: str | None = None) -> None:
        self.tmp = tmp
        self.db = tmp / "ledger.db"
        self.db_url = db or f"sqlite:///{self.db}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.url + "/v1"
        self.log = tmp / f"serve-{self.port}.log"
        cmd = [sys.executable, "-m", "proxy", "serve", "--port", str(self.port),
               "--db", self.db_url, *args]
        if upstream:
            cmd += ["--upstream", upstream]
        if config is not None:
            path = tmp / "llmmeter.toml"
            path.write_text(config)
            cmd += ["--config", str(path)]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
        full_env.update(env or {})
        self.cmd, self.env = cmd, full_env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90) -> Served:
        # Generous: on a loaded machine starting Python and importing llmmeter alone can take many seconds.
        self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=self.tmp,
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        try:
            wait_ready(self.proc, self.url + "/healthz", "llmmeter", self.output, timeout)
        except BaseException:
            self.kill()  # a server that was slow to start is not left running after its test
            raise
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> Served:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what a test reads back -------------------------------------------------------
    def metrics(self, headers: Mapping[str, str] | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = httpx.get(self.url + "/metrics", headers=headers, timeout=60).text
        out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for (n, lbls), value in self.metrics().items():
            d = dict(lbls)
            if n == name and all(d.get(k) == v for k, v in labels.items()):
                total += value
        return total

    def rows(self, timeout: float = 60, expect: int | None = None) -> list[dict[str, Any]]:
        """Ledger rows from the database, waiting for the importer to catch up (with `expect`, up to
        `timeout` s: generous, since a loaded machine may be slow to import)."""
        deadline = time.monotonic() + timeout
        rows: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            if self.db_url.startswith("postgresql://"):
                rows = pg_rows(self.db_url)
                if expect is None or len(rows) >= expect:
                    return rows
            elif self.db.exists():
                con = sqlite3.connect(self.db, timeout=5)
                con.row_factory = sqlite3.Row
                try:
                    rows = [dict(r) for r in con.execute("SELECT * FROM requests ORDER BY start, id")]
                except sqlite3.OperationalError:
                    rows = []
                finally:
                    con.close()
                if expect is None or len(rows) >= expect:
                    return rows
            time.sleep(0.05)
        return rows

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "proxy", *args], env=self.env, cwd=self.tmp,
                              capture_output=True, text=True, timeout=60)


def pg_rows(url: str) -> list[dict[str, Any]]:
    """`SELECT * FROM requests` of a PostgreSQL ledger as dicts, [] before its first migration."""
    with psycopg.connect(url, row_factory=dict_row) as con:
        try:
            return con.execute('SELECT * FROM requests ORDER BY start, id COLLATE "C"').fetchall()
        except psycopg.errors.UndefinedTable:
            return []
