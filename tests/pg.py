"""A throwaway PostgreSQL cluster for the tests: Debian's binaries, a temporary directory,
127.0.0.1 on a free port, one fresh database per test, stopped when the session ends.

PostgreSQL refuses to run as root, so under root (CI) initdb and pg_ctl run as the
`postgres` user that Debian's package creates, in a directory that user owns.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.serve import free_port
from tests.strict import require

MISSING = "Debian's postgresql is not installed (make test installs it as root)"
_names = itertools.count()


def find_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/N/bin with initdb and pg_ctl, else initdb on PATH."""
    found = [Path(d) for d in glob.glob("/usr/lib/postgresql/*/bin")
             if os.access(Path(d) / "initdb", os.X_OK) and os.access(Path(d) / "pg_ctl", os.X_OK)]
    found.sort(key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def _as_root() -> bool:
    return os.geteuid() == 0


def usable() -> bool:
    if find_bindir() is None:
        return False
    if not _as_root():
        return True
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return shutil.which("runuser") is not None


class PgCluster:
    """One initdb'd data directory and the postgres server running on it."""

    def __init__(self, bindir: Path, port: int | None = None) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="llmmeter-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = port or free_port()
        if _as_root():
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if _as_root():
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}{log}")

    def init(self) -> PgCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        return self

    def start(self) -> PgCluster:
        # Durability settings off: a test cluster that dies is thrown away anyway.
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        name = f"llmmeter_test_{next(_names)}"
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f"CREATE DATABASE {name}".encode())
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())

    def remove(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def new_cluster() -> PgCluster:
    """A started cluster of its own (for tests that stop and start the server); caller removes it."""
    bindir = find_bindir()
    assert bindir is not None
    cluster = PgCluster(bindir).init()
    try:
        return cluster.start()
    except BaseException:
        shutil.rmtree(cluster.root, ignore_errors=True)
        raise


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster | None]:
    """The session's cluster, or None where PostgreSQL is not installed (tests then require it)."""
    if not usable():
        yield None
        return
    cluster = new_cluster()
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def pg_url(pg_cluster: PgCluster | None) -> Iterator[str]:
    """A fresh, empty database of the session's cluster, dropped after the test."""
    require(pg_cluster is not None, MISSING)
    assert pg_cluster is not None
    url = pg_cluster.create_database()
    yield url
    pg_cluster.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_db(request: pytest.FixtureRequest) -> str | None:
    """For `serve(db=...)`: None keeps the process's own SQLite file; else a PostgreSQL URL."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("pg_url")
    return url
