"""A burst of concurrent calls through the official SDKs against `llmmeter serve` processes that
enforce a budget, and what the ledger, the fake upstream and /metrics say afterwards.

Each call is one of 400 planned ones (`plan`): OpenAI Chat Completions (the `openai` SDK) or
Anthropic Messages (the `anthropic` SDK), a third streamed, some without usage (the record is
estimated), some cancelled by the client once the upstream has them, some failed by the upstream,
a few with web searches (a server tool's fee the reservation cannot foresee: over_reservation).
Every call says which it is in its prompt ("call 017 ..."), which the fake upstream records.
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import anthropic
import openai
import psycopg
from psycopg.rows import dict_row

from tests.fake_upstream import FakeUpstream
from tests.serve import Served

OPENAI_MODEL, OPENAI_MAX = "gpt-test", 1000  # $1.50 / $6 per million: ~ $0.0061 a call, reservation ~ $0.0065
ANTHROPIC_MODEL, ANTHROPIC_MAX = "claude-sonnet-4-5", 400  # $3 / $15: ~ $0.0061 a call, reservation ~ $0.0069
PROMPT_TOKENS = 40
HEAD = 16  # calls sent first (see `burst`)
TEXT = "tok0 tok1 tok2 tok3 "  # what the fake upstream answers (four chunks)
# Zones around the world: the test's day budget uses the one whose local time is nearest noon, so
# no period boundary falls inside a test run.
ZONES = ("Pacific/Kiritimati", "Pacific/Auckland", "Asia/Tokyo", "Asia/Kolkata", "Europe/Berlin",
         "America/Sao_Paulo", "America/New_York", "America/Los_Angeles", "Pacific/Honolulu")


@dataclass(frozen=True, slots=True)
class Call:
    i: int
    anthropic: bool
    stream: bool
    no_usage: bool  # the upstream reports no usage: the record is estimated
    cancel: bool  # the client leaves once the upstream has the request
    fail: bool  # the upstream answers 500
    web_search: bool  # two web searches: $0.02 beyond any reservation

    @property
    def marker(self) -> bytes:
        return f"call {self.i:03d} ".encode()


def plan(i: int) -> Call:
    an = i % 4 == 3
    fail = i % 25 == 13
    return Call(i, an, stream=i % 3 == 0, no_usage=i % 5 == 4 and not fail,
                cancel=i % 16 in (2, 7) and not fail, fail=fail, web_search=an and i % 20 == 11)


@dataclass(slots=True)
class Result:
    call: Call
    kind: str  # ok | refused | cancelled | failed | lost | bad
    request_id: str | None = None
    detail: str = ""


@dataclass(slots=True)
class Target:
    """One replica and the two SDK clients that talk to it (the SDKs' default retries on)."""

    served: Served
    oa: openai.AsyncOpenAI = field(init=False)
    an: anthropic.AsyncAnthropic = field(init=False)
    dead: bool = False

    def __post_init__(self) -> None:
        self.oa = openai.AsyncOpenAI(base_url=self.served.base_url, api_key="k", timeout=60)
        self.an = anthropic.AsyncAnthropic(base_url=self.served.url, api_key="k", timeout=60)

    async def close(self) -> None:
        await self.oa.close()
        await self.an.close()


def noon_zone(now: datetime) -> str:
    def off_noon(z: str) -> float:
        local = now.astimezone(ZoneInfo(z))
        return abs(local.hour + local.minute / 60 - 12)
    return min(ZONES, key=off_noon)


def day_period(zone: str, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the zone's calendar day holding `now`, in UTC (computed here, not by the engine)."""
    z = ZoneInfo(zone)
    d = now.astimezone(z).date()
    nxt = d + timedelta(days=1)
    return (datetime(d.year, d.month, d.day, tzinfo=z).astimezone(UTC),
            datetime(nxt.year, nxt.month, nxt.day, tzinfo=z).astimezone(UTC))


def budget_config(name: str, limit: str, zone: str) -> str:
    return (f'[[budget]]\nname = "{name}"\nlimit_usd = "{limit}"\nperiod = "day"\ntz = "{zone}"\n'
            'mode = "enforce"\nalert_at_pct = [50]\n')


def fake_headers(c: Call) -> dict[str, str]:
    h: dict[str, str] = {"x-fake-delay-ms": "150" if c.stream else "300"}
    usage: dict[str, int] = {"prompt": PROMPT_TOKENS, "completion": ANTHROPIC_MAX if c.anthropic else OPENAI_MAX}
    if c.web_search:
        usage["web_search"] = 2
    h["x-fake-usage"] = json.dumps(usage)
    if c.no_usage:
        h["x-fake-no-usage"] = "1"
    if c.fail:
        h["x-fake-status"] = "500"
    if c.cancel:
        h["x-fake-hold" if c.stream else "x-fake-hang"] = "1"  # parked until the client leaves
    return h


def upstream_saw(fake: FakeUpstream) -> list[int]:
    """The call numbers of the requests the fake upstream received, one entry per request."""
    out = []
    for r in list(fake.requests):
        body: bytes = r["body"]
        at = body.find(b"call ")
        if at >= 0:
            out.append(int(body[at + 5:at + 8]))
    return out


class Reply(Protocol):
    """An SDK error's HTTP response (the SDKs bring their own httpx)."""

    status_code: int

    @property
    def headers(self) -> Mapping[str, str]: ...

    def json(self) -> Any: ...


@dataclass(slots=True)
class Refusals:
    """What every 429 must look like (SPEC "Budgets (enforced)")."""

    budget: str
    period_end: datetime

    def check(self, response: Reply, an: bool) -> str:
        """'' when the refusal is right, else what is wrong with it."""
        problems = []
        end = self.period_end.isoformat().replace("+00:00", "Z")
        body = response.json()
        if response.status_code != 429:
            problems.append(f"status {response.status_code}")
        if an:
            err = body.get("error") or {}
            if body.get("type") != "error" or err.get("type") != "rate_limit_error":
                problems.append(f"not Anthropic's error shape: {body}")
        else:
            err = body.get("error") or {}
            if err.get("type") != "budget_exceeded":
                problems.append(f"not OpenAI's error shape: {body}")
        if (err.get("code"), err.get("budget"), err.get("period_end")) != ("budget_exceeded", self.budget, end):
            problems.append(f"code/budget/period_end: {err}")
        if not err.get("message"):
            problems.append("no message")
        if response.headers.get("x-should-retry") != "false":
            problems.append(f"x-should-retry {response.headers.get('x-should-retry')!r}")
        wait = (self.period_end - datetime.now(UTC)).total_seconds()
        retry_after = response.headers.get("retry-after", "")
        if not retry_after.isdigit() or abs(int(retry_after) - math.ceil(wait)) > 30:
            problems.append(f"retry-after {retry_after!r}, {wait:.0f} s to the period's end")
        return "; ".join(problems)


async def _openai(t: Target, c: Call, fake: FakeUpstream, refusals: Refusals) -> Result:
    client = t.oa.with_options(max_retries=0) if c.fail or c.cancel else t.oa
    kw: dict[str, Any] = dict(model=OPENAI_MODEL, max_tokens=OPENAI_MAX, extra_headers=fake_headers(c),
                              messages=[{"role": "user", "content": f"call {c.i:03d} of the burst"}])
    try:
        if c.stream:
            stream = await client.chat.completions.create(stream=True, **kw)
            rid = stream.response.headers.get("x-request-id")
            parts, finish = [], None
            async for chunk in stream:
                if c.cancel:
                    await stream.close()
                    return Result(c, "cancelled")
                for choice in chunk.choices:
                    parts.append(choice.delta.content or "")
                    finish = choice.finish_reason or finish
            if "".join(parts) != TEXT or finish != "stop":
                return Result(c, "bad", rid, f"incomplete stream: {parts} {finish}")
            return Result(c, "ok", rid)
        task = asyncio.ensure_future(client.chat.completions.with_raw_response.create(**kw))
        if c.cancel and await _cancel_once_upstream(task, fake, c):
            return Result(c, "cancelled")
        raw = await task
        reply = raw.parse()  # the openai SDK's raw response parses synchronously
        choice = reply.choices[0]
        if choice.message.content != TEXT or choice.finish_reason != "stop" or (reply.usage is None) != c.no_usage:
            return Result(c, "bad", raw.headers.get("x-request-id"), f"incomplete reply: {reply}")
        return Result(c, "ok", raw.headers.get("x-request-id"))
    except openai.RateLimitError as e:
        problem = refusals.check(e.response, False)
        return Result(c, "bad" if problem else "refused", None, problem)
    except openai.InternalServerError as e:
        return Result(c, "failed" if c.fail and e.status_code == 500 else "bad", None, str(e))
    except openai.APIConnectionError as e:
        return Result(c, "lost" if t.dead else "bad", None, repr(e))
    except openai.APIError as e:
        return Result(c, "bad", None, repr(e))


async def _anthropic(t: Target, c: Call, fake: FakeUpstream, refusals: Refusals) -> Result:
    client = t.an.with_options(max_retries=0) if c.fail or c.cancel else t.an
    kw: dict[str, Any] = dict(model=ANTHROPIC_MODEL, max_tokens=ANTHROPIC_MAX, extra_headers=fake_headers(c),
                              messages=[{"role": "user", "content": f"call {c.i:03d} of the burst"}])
    try:
        if c.stream:
            stream = await client.messages.create(stream=True, **kw)
            rid = stream.response.headers.get("x-request-id")
            text, kinds = "", []
            async for event in stream:
                if c.cancel:
                    await stream.close()
                    return Result(c, "cancelled")
                kinds.append(event.type)
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    text += event.delta.text
            if text != TEXT or kinds[-1] != "message_stop":
                return Result(c, "bad", rid, f"incomplete stream: {text!r} {kinds}")
            return Result(c, "ok", rid)
        task = asyncio.ensure_future(client.messages.with_raw_response.create(**kw))
        if c.cancel and await _cancel_once_upstream(task, fake, c):
            return Result(c, "cancelled")
        raw = await task
        msg = await raw.parse()
        block = msg.content[0]
        if block.type != "text" or block.text != TEXT or msg.stop_reason != "end_turn":
            return Result(c, "bad", raw.headers.get("x-request-id"), f"incomplete reply: {msg}")
        return Result(c, "ok", raw.headers.get("x-request-id"))
    except anthropic.RateLimitError as e:
        problem = refusals.check(e.response, True)
        return Result(c, "bad" if problem else "refused", None, problem)
    except anthropic.InternalServerError as e:
        return Result(c, "failed" if c.fail and e.status_code == 500 else "bad", None, str(e))
    except anthropic.APIConnectionError as e:
        return Result(c, "lost" if t.dead else "bad", None, repr(e))
    except anthropic.APIError as e:
        return Result(c, "bad", None, repr(e))


async def _cancel_once_upstream(task: asyncio.Future[Any], fake: FakeUpstream, c: Call) -> bool:
    """Cancel the call once the upstream holds it (so it surely was admitted); False if it ended first."""
    while not task.done():
        if any(c.marker in r["body"] for r in list(fake.requests)):
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return True
            return False
        await asyncio.sleep(0.01)
    return False


async def burst(targets: Sequence[Target], calls: Sequence[Call], fake: FakeUpstream, refusals: Refusals,
                kill_after: int | None = None) -> list[Result]:
    """Every call at once, spread over the targets; with `kill_after`, the last target is killed
    with SIGKILL once the upstream has received that many requests.

    The first HEAD calls (every kind: both APIs, streamed, estimated, cancelled, failed, web
    searches) go out first, and the rest once the upstream holds those, so that each kind is
    surely among the admitted while the burst arrives; which of the others fit is a race."""

    async def one(c: Call) -> Result:
        t = targets[(c.i + c.i // 4) % len(targets)]  # each API to each replica
        return await (_anthropic if c.anthropic else _openai)(t, c, fake, refusals)

    async def killer() -> None:
        assert kill_after is not None
        while len(fake.requests) < kill_after:
            await asyncio.sleep(0.005)
        targets[-1].dead = True
        await asyncio.to_thread(targets[-1].served.kill)

    extra = [asyncio.ensure_future(killer())] if kill_after is not None else []
    first = [asyncio.ensure_future(one(c)) for c in calls[:HEAD]]
    deadline = time.monotonic() + 10
    while len(set(upstream_saw(fake)) & {c.i for c in calls[:HEAD]}) < HEAD and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    rest = [asyncio.ensure_future(one(c)) for c in calls[HEAD:]]
    results = await asyncio.gather(*first, *rest)
    for task in extra:
        await task
    return list(results)


# -- the ledger ------------------------------------------------------------------------------------

def query(served: Served, sql: str, params: tuple[object, ...] = ()) -> list[dict[str, Any]]:
    """Rows of `sql` on the replica's ledger database ('?' placeholders)."""
    if served.db_url.startswith("postgresql://"):
        with psycopg.connect(served.db_url, row_factory=dict_row) as pg:
            return pg.execute(sql.replace("?", "%s").encode(), params).fetchall()
    lite = sqlite3.connect(served.db, timeout=10)
    lite.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in lite.execute(sql, params)]
    finally:
        lite.close()


def micros(at: datetime) -> int:
    return int((at - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1_000_000 + at.microsecond


def settled_rows(served: Served, at_least: int, timeout: float = 30) -> list[dict[str, Any]]:
    """The ledger's records once at least `at_least` are in and no more arrive for a second."""
    deadline = time.monotonic() + timeout
    rows: list[dict[str, Any]] = []
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        rows = served.rows(timeout=1)
        if len(rows) != last:
            last, since = len(rows), time.monotonic()
        elif len(rows) >= at_least and time.monotonic() - since > 1.0:
            return rows
        time.sleep(0.1)
    return rows


@dataclass(frozen=True, slots=True)
class Billed:
    billed: int  # units: the priced cost of the period's records
    overrun: int  # units: sum of (cost - reserved) over records flagged over_reservation
    flagged: int
    rejected: int  # records refused by the budget


def billed(rows: Sequence[dict[str, Any]], budget: str, lo: datetime, hi: datetime) -> Billed:
    lo_us, hi_us = micros(lo), micros(hi)
    total = overrun = flagged = rejected = 0
    for r in rows:
        assert lo_us <= r["start"] < hi_us, "every record of the test falls in the budget's period"
        flags = (r["flags"] or "").split(",")
        total += r["cost_units"] or 0
        if "over_reservation" in flags:
            flagged += 1
            overrun += r["cost_units"] - r["reserved_units"]
        if r["outcome"] == "rejected" and r["budget"] == budget:
            rejected += 1
    return Billed(total, overrun, flagged, rejected)


def leases(served: Served, lo: datetime) -> list[dict[str, Any]]:
    return query(served, "SELECT id, amount, expires_at FROM budget_leases WHERE period_start = ?", (micros(lo),))


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.2)


def month_of(day: date) -> str:
    return f"{day.year:04d}-{day.month:02d}"
