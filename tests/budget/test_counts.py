"""`n`, `best_of` and the output limits in any spelling a lenient upstream reads bound the
reservation (issue 32, item 2): `"200"` and `200.0` are 200 answers to pydantic-typed servers such
as vLLM, so an enforced budget reserves 200 answers for them as for `200`; a count no upstream can
read as a number is refused with 400 before it reaches one. Real `llmmeter serve`, the fake upstream."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.budget.burst import settled_rows
from tests.fake_upstream import FakeUpstream

pytestmark = pytest.mark.timeout(120)
CONFIG = '[[budget]]\nname = "one-dollar"\nlimit_usd = "1"\nmode = "enforce"\n'


def test_every_spelling_of_n_is_reserved_as_the_answers_it_asks_for(fake: FakeUpstream, serve: Any) -> None:
    s = serve(upstream=fake.base_url, config=CONFIG)
    msg = [{"role": "user", "content": "hi"}]
    spellings: list[Any] = [200, "200", 200.0, "2e2", 199.5]
    with httpx.Client(base_url=s.base_url, timeout=30) as c:
        # gpt-test, $6 a million output: 200 answers of 1,000 tokens reserve $1.20, past the $1 limit.
        replies = [c.post("/chat/completions", json={"model": "gpt-test", "messages": msg, "max_tokens": 1000,
                                                     "n": n}) for n in spellings]
        assert [r.status_code for r in replies] == [429] * len(spellings), [r.text[:200] for r in replies]
        as_string = c.post("/chat/completions", json={"model": "gpt-test", "messages": msg, "n": 2,
                                                       "max_completion_tokens": "100000"})
        assert as_string.status_code == 429  # 200,000 tokens at $6 a million: $1.20
        unreadable = c.post("/chat/completions", json={"model": "gpt-test", "messages": msg, "n": "lots"})
        assert unreadable.status_code == 400
        assert unreadable.json()["error"]["code"] == "unreadable_count" and "`n`" in unreadable.text
        fits = c.post("/chat/completions", json={"model": "gpt-test", "messages": msg, "max_tokens": "100",
                                                 "n": "2"})
        assert fits.status_code == 200
    assert sum(1 for r in list(fake.requests) if b'"hi"' in r["body"]) == 1  # only the one that fits
    rows = settled_rows(s, len(spellings) + 3)
    reserved = sorted(r["reserved_units"] for r in rows if r["code"] == 429)
    assert len(reserved) == len(spellings) + 1 and reserved[0] >= 12_000_000_000, reserved
