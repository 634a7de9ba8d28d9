"""The `llmmeter` command line (SPEC "Commands")."""

from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pricing import PriceBook, PriceTableError, check_dir, default_tables_dir, load_dir
from proxy import settings as config
from proxy.errors import ConfigError, LLMMeterError, OutputError
from proxy.prices_in_use import tables_in_use

if TYPE_CHECKING:
    from proxy.export import Output
    from proxy.ledger import Ledger
    from proxy.ledger.record import Record


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """The reader of our output left (`llmmeter prices show | head`): end quietly, as a process
    killed by SIGPIPE would, with no traceback; stdout goes to /dev/null so the flush at exit
    does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        code: int = args.run(args)
        return code
    except (ConfigError, PriceTableError, OutputError) as e:  # what the user gave is wrong
        print(f"llmmeter: {e}", file=sys.stderr)
        return 2
    except LLMMeterError as e:  # a ledger that cannot be opened or is too new for this build
        # Anything else is a bug: it keeps its traceback.
        print(f"llmmeter: {e}", file=sys.stderr)
        return 1


# Help lines shared by several commands: each says the value's format and its default.
CONFIG_HELP = "config file (default: $LLMMETER_CONFIG, else ./llmmeter.toml if present)"
DB_HELP = ("ledger URL, sqlite:///PATH or postgresql://USER@HOST/DB (default: $LLMMETER_DB, else the config's "
           "[ledger] url, else sqlite:///data/llmmeter.db)")
PRICES_HELP = ("price table directory (default: $LLMMETER_PRICES, else the config's [pricing] dir, "
               "else the shipped tables)")
_TABLES_HELP = "price table directory (default: the tables in use: LLMMETER_PRICES, [pricing] dir, else shipped)"
FROM_HELP = "first moment, inclusive: YYYY-MM-DD (midnight in --tz) or an RFC 3339 time"
TO_HELP = "end, exclusive: YYYY-MM-DD (midnight in --tz) or an RFC 3339 time; all of November: --to 2026-12-01"
TZ_HELP = "IANA time zone for dates, days and hours, e.g. America/Sao_Paulo (default: %(default)s)"
TENANT_HELP = "only this tenant's requests (default: every tenant)"
FORMAT_HELP = "output format, one of %(choices)s (default: %(default)s)"
EXPORT_FORMAT_HELP = FORMAT_HELP + "; focus: FOCUS 1.2 cost and usage rows, one per UTC day and charge"
OUT_HELP = "write to this file (default: standard output)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmmeter", description="Meter, price and record LLM API traffic.")
    sub = p.add_subparsers(metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the metering proxy")
    serve.add_argument("--config", type=Path, help=CONFIG_HELP)
    serve.add_argument("--host",
                       help="address to listen on (default: $LLMMETER_HOST, else [server] host, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="TCP port (default: $LLMMETER_PORT, else [server] port, else 8080)")
    serve.add_argument("--upstream", metavar="URL",
                       help=("one default upstream base URL, e.g. https://api.moonshot.ai/v1, replacing every "
                             "[[upstream]] (default: $LLMMETER_UPSTREAM, else the config's [[upstream]] tables)"))
    serve.add_argument("--db", metavar="URL", help=DB_HELP)
    serve.add_argument("--prices", type=Path, metavar="DIR", help=PRICES_HELP)
    serve.add_argument("--workers", type=int, metavar="N",
                       help="worker processes (default: $LLMMETER_WORKERS, else [server] workers, else 1)")
    serve.set_defaults(run=_serve)

    export = sub.add_parser("export", help="per-request ledger rows in [from, to)")
    export.add_argument("--from", dest="start", required=True, metavar="WHEN", help=FROM_HELP)
    export.add_argument("--to", dest="end", required=True, metavar="WHEN", help=TO_HELP)
    export.add_argument("--tz", default="UTC", metavar="ZONE", help=TZ_HELP)
    export.add_argument("--tenant", help=TENANT_HELP)
    export.add_argument("--format", choices=("csv", "jsonl", "focus"), default="csv", help=EXPORT_FORMAT_HELP)
    export.add_argument("--out", type=Path, metavar="FILE", help=OUT_HELP)
    export.add_argument("--db", metavar="URL", help=DB_HELP)
    export.add_argument("--config", type=Path, help=CONFIG_HELP)
    export.add_argument("--prices", type=Path, metavar="DIR", help=PRICES_HELP)
    export.set_defaults(run=_export)

    report = sub.add_parser("report", help="the monthly usage report")
    report.add_argument("--month", required=True, metavar="YYYY-MM", help="the month to report, e.g. 2026-11")
    report.add_argument("--tz", default="UTC", metavar="ZONE", help=TZ_HELP)
    report.add_argument("--tenant", help=TENANT_HELP)
    report.add_argument("--reprice-at", metavar="DATETIME",
                        help=("also price the month at the tables in force at this RFC 3339 time or YYYY-MM-DD "
                              "(default: no repricing)"))
    report.add_argument("--format", choices=("md", "json", "csv", "html"), default="md", help=FORMAT_HELP)
    report.add_argument("--out", type=Path, metavar="FILE", help=OUT_HELP)
    report.add_argument("--db", metavar="URL", help=DB_HELP)
    report.add_argument("--config", type=Path, help=CONFIG_HELP)
    report.add_argument("--prices", type=Path, metavar="DIR", help=PRICES_HELP)
    report.set_defaults(run=_report)

    prices = sub.add_parser("prices", help="check or show price tables")
    psub = prices.add_subparsers(metavar="ACTION")
    check = psub.add_parser("check", help="validate price tables (file:line errors)")
    check.add_argument("dir", nargs="?", type=Path, help=_TABLES_HELP)
    check.add_argument("--config", type=Path, help=CONFIG_HELP)
    check.set_defaults(run=_prices_check)
    show = psub.add_parser("show", help="print the prices in force")
    show.add_argument("--at", help="RFC 3339 time or YYYY-MM-DD (default: now)")
    show.add_argument("dir", nargs="?", type=Path, help=_TABLES_HELP)
    show.add_argument("--config", type=Path, help=CONFIG_HELP)
    show.set_defaults(run=_prices_show)
    imp = psub.add_parser("import", help="write version-2 price tables from a maintained source")
    imp.add_argument("source", choices=("genai-prices",), help="where the prices come from: genai-prices")
    imp.add_argument("--provider", action="append", metavar="ID",
                     help="only this provider id, e.g. openai (repeatable; default: every provider)")
    imp.add_argument("--out", type=Path, help="table directory to write (default: the --prices/config directory)")
    imp.add_argument("--models", action="append", metavar="GLOB",
                     help="only model ids matching this glob (repeatable; default: every model)")
    imp.add_argument("--upstream", action="append", metavar="ID=NAME",
                     help="the provider ID whose prices the upstream NAME's traffic uses (repeatable; default: none)")
    imp.add_argument("--config", type=Path, help=CONFIG_HELP)
    imp.set_defaults(run=_prices_import)
    diff = psub.add_parser("diff", help="list models whose prices differ from a maintained source; exit 1 if any")
    diff.add_argument("dir", nargs="?", type=Path, help=_TABLES_HELP)
    diff.add_argument("--config", type=Path, help=CONFIG_HELP)
    diff.add_argument("--against", required=True, choices=("genai-prices",),
                      help="the source to compare with: genai-prices")
    diff.add_argument("--at", help="RFC 3339 time or YYYY-MM-DD (default: now)")
    diff.set_defaults(run=_prices_diff)

    reprice = sub.add_parser("reprice", help="price ledger records with the entries in force at their start")
    reprice.add_argument("--from", dest="start", required=True, metavar="WHEN", help=FROM_HELP)
    reprice.add_argument("--to", dest="end", required=True, metavar="WHEN", help=TO_HELP)
    reprice.add_argument("--tz", default="UTC", metavar="ZONE", help=TZ_HELP)
    reprice.add_argument("--only-unpriced", action="store_true",
                         help="only records unpriced when written (default: every record)")
    reprice.add_argument("--apply", action="store_true", help="write the changes (default: show them only)")
    reprice.add_argument("--db", metavar="URL", help=DB_HELP)
    reprice.add_argument("--config", type=Path, help=CONFIG_HELP)
    reprice.add_argument("--prices", type=Path, metavar="DIR", help=PRICES_HELP)
    reprice.set_defaults(run=_reprice)

    reconcile = sub.add_parser("reconcile", help="the ledger against the provider's own billing")
    reconcile.add_argument("--month", required=True, metavar="YYYY-MM", help="the month to compare, e.g. 2026-11")
    reconcile.add_argument("--against", required=True, metavar="SOURCE",
                           help="openai, anthropic, provider_cost, or a file or folder of saved API pages")
    reconcile.add_argument("--threshold-pct", type=Decimal, default=Decimal(1), metavar="PCT",
                           help=("exit 1 when a day and model differ by more than this percentage (default: "
                                 "%(default)s)"))
    reconcile.add_argument("--format", choices=("md", "json", "csv"), default="md", help=FORMAT_HELP)
    reconcile.add_argument("--out", type=Path, metavar="FILE", help=OUT_HELP)
    reconcile.add_argument("--db", metavar="URL", help=DB_HELP)
    reconcile.add_argument("--config", type=Path, help=CONFIG_HELP)
    reconcile.set_defaults(run=_reconcile)

    keys = sub.add_parser("keys", help="proxy keys for tenants")
    ksub = keys.add_subparsers(metavar="ACTION")
    new = ksub.add_parser("new", help="print a new random proxy key once, and its config line")
    new.add_argument("tenant", help="the tenant's name, as in its [[tenant]] table")
    new.set_defaults(run=_keys_new)

    migrate = sub.add_parser("migrate", help="bring a ledger to this version's schema (serve does it at start)")
    migrate.add_argument("--db", metavar="URL", help=DB_HELP)
    migrate.add_argument("--config", type=Path, help=CONFIG_HELP)
    migrate.set_defaults(run=_migrate)

    ledger = sub.add_parser("ledger", help="ledger upkeep")
    lsub = ledger.add_subparsers(metavar="ACTION")
    retry = lsub.add_parser("retry", help="import the records the database refused (dead letters) again")
    retry.add_argument("--db", metavar="URL", help=DB_HELP)
    retry.add_argument("--config", type=Path, help=CONFIG_HELP)
    retry.set_defaults(run=_ledger_retry)
    adopt = lsub.add_parser("adopt", help="import journal segments of another ledger set aside in foreign/")
    adopt.add_argument("segments", nargs="*", type=Path, metavar="SEGMENT",
                       help="segment files to import (default: every segment in the journal's foreign/ folders)")
    adopt.add_argument("--db", metavar="URL", help=DB_HELP)
    adopt.add_argument("--config", type=Path, help=CONFIG_HELP)
    adopt.set_defaults(run=_ledger_adopt)
    prune = lsub.add_parser("prune", help="delete the per-request rows of whole past months; rollups stay")
    prune.add_argument("--before", required=True, metavar="YYYY-MM",
                       help="prune every UTC month before this one, e.g. 2026-09 (at most the current month)")
    prune.add_argument("--apply", action="store_true", help="delete (default: say what would be deleted only)")
    prune.add_argument("--db", metavar="URL", help=DB_HELP)
    prune.add_argument("--config", type=Path, help=CONFIG_HELP)
    prune.set_defaults(run=_ledger_prune)
    return p


def _prices_import(args: argparse.Namespace) -> int:
    from pricing.genai import import_command

    return import_command(args)


def _prices_diff(args: argparse.Namespace) -> int:
    from pricing.genai import diff_command

    tables = tables_in_use(args.config, args.dir)
    return diff_command(args, tables.directory, tables.origin)


def _reprice(args: argparse.Namespace) -> int:
    from proxy.ledger.reprice import command

    return command(args)


def _reconcile(args: argparse.Namespace) -> int:
    from proxy.reconcile import command

    return command(args)


def _settings(args: argparse.Namespace, **flags: object) -> config.Settings:
    path = args.config or config.default_config_path()
    return config.load(path, overrides={k: v for k, v in flags.items() if v is not None})


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.metrics.exposure import check_metrics_exposure
    from proxy.server.protocol import RelayProtocol

    flags = dict(host=args.host, port=args.port, upstream=args.upstream, db=args.db, prices=args.prices,
                 workers=args.workers)
    s = _settings(args, **flags)
    if not s.upstreams:
        raise ConfigError("no upstream: pass --upstream URL, set LLMMETER_UPSTREAM, or add "
                          "[[upstream]] to llmmeter.toml")
    check_metrics_exposure(s)
    s = config.resolve_api_keys(s)
    # No X-Forwarded-* rewriting (nothing reads the client address), no per-request middleware.
    options: dict[str, Any] = dict(host=s.host, port=s.port, loop="uvloop", http=RelayProtocol, lifespan="on",
                                   access_log=False, server_header=False, date_header=False, log_level="info",
                                   proxy_headers=False)  # the idle timeout is the protocol's (ServerLimits)
    if s.workers > 1:
        from proxy.server import workers

        workers.run(args.config or config.default_config_path(),
                    {k: v for k, v in flags.items() if v is not None}, s.workers, options)
        return 0
    from proxy.app import create_app
    from proxy.server.logs import QuietBrokenStreams
    from proxy.server.logs import configure as configure_logs

    logging.getLogger("uvicorn.error").addFilter(QuietBrokenStreams())
    configure_logs()
    app = create_app(s)
    gc.freeze()  # what start-up built lives as long as the process: keep it out of every collection
    uvicorn.run(app, **options)
    return 0


def _export(args: argparse.Namespace) -> int:
    from proxy.export import parse_when, write_export
    from proxy.ledger import Ledger

    tz = _zone(args.tz)
    start, end = parse_when(args.start, tz), parse_when(args.end, tz)
    if end <= start:
        raise ConfigError("--to must be after --from (it is exclusive)")
    s = _settings(args, db=args.db, prices=args.prices)
    ledger = Ledger(s.ledger_url, s.journal_dir, s.fsync, read_only=True)  # no import, no migration
    output = _output(args.out, ledger)
    ledger.start()
    try:
        rows = ledger.rows(start, end, args.tenant)
        if args.format == "focus":
            return _focus(rows, s, start, end, output)
        if output is None:
            write_export(rows, args.format, sys.stdout)
            return 0
        with output.open() as out:
            progress = _Progress(ledger.count(start, end, args.tenant), sys.stderr)
            n = write_export(rows, args.format, out, progress=progress if progress.active else None)
            progress.done(n)
        return 0
    finally:
        ledger.close()


def _focus(rows: Iterable[Record], s: config.Settings, start: datetime, end: datetime, output: Output | None) -> int:
    """FOCUS rows need the price entries the records were priced at (list prices, SKU price ids)."""
    from proxy.focus import write_focus

    book = PriceBook(load_dir(s.prices_dir or default_tables_dir()), dict(s.tier_aliases))
    if output is None:
        write_focus(rows, book, start, end, sys.stdout)
        return 0
    with output.open() as out:
        write_focus(rows, book, start, end, out)
    return 0


def _report(args: argparse.Namespace) -> int:
    from proxy.export import parse_when
    from proxy.ledger import Ledger
    from proxy.report import ReportInput, build_report, render

    tz = _zone(args.tz)
    _check_month(args.month)
    s = _settings(args, db=args.db, prices=args.prices)
    book = PriceBook(load_dir(s.prices_dir or default_tables_dir()), dict(s.tier_aliases))
    w = s.workloads
    inp = ReportInput(month=args.month, tz=tz, book=book, selfhost=s.selfhost,
                      workload_bounds=(w.medium, w.long, w.very_long),
                      self_hosted_upstreams=frozenset(u.name for u in s.upstreams if u.self_hosted),
                      tenant=args.tenant,
                      reprice_at=parse_when(args.reprice_at, tz) if args.reprice_at else None,
                      budgets=s.budgets)
    # Read-only: no import, no migration. Records still in the journal after a crash land with
    # the next `serve` (or `llmmeter migrate`), not here.
    ledger = Ledger(s.ledger_url, s.journal_dir, s.fsync, read_only=True)
    output = _output(args.out, ledger)
    ledger.start()
    try:
        text = render(build_report(ledger.store, inp), args.format)
    finally:
        ledger.close()
    if output is None:
        sys.stdout.write(text)
    else:
        with output.open() as out:
            out.write(text)
    return 0


def _output(out: Path | None, ledger: Ledger) -> Output | None:
    """`--out`, checked before the ledger is opened: never the ledger's own files or journal."""
    from proxy.export import check_output
    from proxy.ledger.store.sqlite import SqliteStore

    if out is None:
        return None
    files: list[Path] = []
    if isinstance(ledger.store, SqliteStore):
        db = ledger.store.path
        files = [db, *(db.with_name(db.name + suffix) for suffix in ("-wal", "-shm", "-journal"))]
    return check_output(out, files, ledger.journal_dir)


def _check_month(month: str) -> None:
    from proxy.export import check_year

    year = month.strip().partition("-")[0]
    if year.isdigit():  # the format itself is month_range's to check
        check_year(int(year), f"--month {month!r}")


class _Progress:
    """A one-line progress bar on a terminal; silent when stderr is piped."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.active = stream.isatty() and total > 10_000
        self.last = -1

    def __call__(self, n: int) -> None:
        pct = n * 100 // max(self.total, 1)
        if pct != self.last:
            self.last = pct
            bar = "#" * (pct // 4)
            self.stream.write(f"\rexport [{bar:<25}] {pct:3d}% {n:,}/{self.total:,}")
            self.stream.flush()

    def done(self, n: int) -> None:
        if self.active:
            self.stream.write(f"\rexport: {n:,} rows written{' ' * 30}\n")


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {name!r} (use an IANA name like America/Sao_Paulo)") from None


def _prices_check(args: argparse.Namespace) -> int:
    tables = tables_in_use(args.config, args.dir)
    errors = check_dir(tables.directory)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"{tables}: {len(errors)} {'error' if len(errors) == 1 else 'errors'}", file=sys.stderr)
        return 1
    n = len(load_dir(tables.directory))
    print(f"{tables}: {n} price entries, all valid")
    return 0


def _prices_show(args: argparse.Namespace) -> int:
    from proxy.export import parse_when

    at = parse_when(args.at, ZoneInfo("UTC")) if args.at else datetime.now(UTC)
    tables = tables_in_use(args.config, args.dir)
    book = PriceBook(load_dir(tables.directory))
    rows = sorted(book.in_force(at), key=lambda p: (p.model, p.tier, p.upstream or "", p.inference_geo or ""))
    print(f"{tables}: prices in force at {at.isoformat()} (USD per million tokens; web search USD per 1,000 calls)")
    print(f"{'model':<28} {'tier':<10} {'upstream':<12} {'input':>9} {'cache_read':>10} "
          f"{'cache_write':>11} {'output':>9} {'cache_write_1h':>14} {'web_search_1k':>13} {'geo':<6} effective_from")

    def usd(v: Decimal | None) -> str:  # plain notation, as written: never 1E-10
        return "-" if v is None else format(v, "f")

    for p in rows:
        print(f"{p.model:<28} {p.tier:<10} {p.upstream or '-':<12} {usd(p.input):>9} {usd(p.cache_read):>10} "
              f"{usd(p.cache_write):>11} {usd(p.output):>9} {usd(p.cache_write_1h):>14} "
              f"{usd(p.web_search_per_1k):>13} {p.inference_geo or '-':<6} {p.effective_from.isoformat()}")
        for band in p.bands:  # one line each; a price the band leaves out is the entry's
            prices = ("input", "cache_read", "cache_write", "output", "cache_write_1h")
            given = ", ".join(f"{k} {usd(v)}" for k in prices if (v := getattr(band, k)) is not None)
            print(f"  band above {band.above_input_tokens:,} input-side tokens: {given}")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    """Apply the ledger's pending migrations, then import what its journal still holds; report and
    export never migrate, and say to run this when a ledger is older than they read."""
    from proxy.ledger import Ledger

    s = _settings(args, db=args.db)
    ledger = Ledger(s.ledger_url, s.journal_dir, s.fsync)
    done = ledger.migrate()
    print(f"{ledger.store.shown}: {done.summary()}")
    return 0


def _ledger_retry(args: argparse.Namespace) -> int:
    """Dead letters back into the ledger; exit 1 while some are still refused (kept for later)."""
    from proxy.ledger import Ledger

    s = _settings(args, db=args.db)
    ledger = Ledger(s.ledger_url, s.journal_dir, s.fsync)
    stats = ledger.retry_dead_letters()
    print(f"{ledger.dead_letter_dir}: {stats.summary()}")
    return 1 if stats.refused else 0


def _ledger_prune(args: argparse.Namespace) -> int:
    from proxy.ledger.retention import command

    return command(args)


def _ledger_adopt(args: argparse.Namespace) -> int:
    """Foreign journal segments into this ledger; exit 1 while some are held by a live process."""
    from proxy.ledger import Ledger

    s = _settings(args, db=args.db)
    ledger = Ledger(s.ledger_url, s.journal_dir, s.fsync)
    stats = ledger.adopt(args.segments)
    print(f"{ledger.store.shown}: {stats.summary()}")
    return 1 if stats.busy else 0


def _keys_new(args: argparse.Namespace) -> int:
    # The rule `serve` applies; a name that passes it needs no escaping inside TOML quotes.
    problem = config.tenant_name_problem(args.tenant)
    if problem:
        raise ConfigError(problem)
    key = "llmm-" + secrets.token_urlsafe(32)
    digest = hashlib.sha256(key.encode()).hexdigest()
    print(f"proxy key for {args.tenant} (shown once; give it to the team, store it nowhere else):")
    print(key)
    print("\nadd to llmmeter.toml:")
    print(f'[[tenant]]\nname = "{args.tenant}"\nkey_sha256 = ["{digest}"]')
    return 0
