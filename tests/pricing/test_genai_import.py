"""`llmmeter prices import genai-prices` and `prices diff` on genai-prices' real shipped data
(the pinned release), written into temporary directories and read back by the loader."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from pricing import PriceBook, Tokens, check_dir, default_tables_dir, load_dir, price_tokens, usd
from pricing.genai import ImportResult, import_tables
from pricing.genai_data import Data, load, regex_to_glob
from proxy.errors import ConfigError

TODAY = date(2026, 12, 6)
LATER = date(2027, 1, 15)


@pytest.fixture(scope="module")
def data() -> Data:
    return load()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", "prices", *args], capture_output=True, text=True,
                          timeout=120)


def skipped(result: ImportResult) -> list[str]:
    return [str(s) for s in result.skipped]


def test_reads_the_pinned_release_without_its_network_updater() -> None:
    # Every connection attempt fails loudly in this process: reading the data must need none, and
    # must start no updater thread.
    code = ("import socket, threading\n"
            "def refuse(*a, **k): raise SystemExit('network used')\n"
            "socket.socket.connect = refuse; socket.create_connection = refuse\n"
            "from pricing.genai_data import load; d = load()\n"
            "print(d.version, len(d.providers), threading.active_count())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    version, providers, threads = r.stdout.split()
    assert (version, threads) == ("0.2.5", "1") and int(providers) > 10, r.stderr


def test_import_writes_one_valid_table_per_provider(data: Data, tmp_path: Path) -> None:
    result = import_tables(data, tmp_path, providers=["anthropic", "openai"], today=TODAY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["genai-prices-anthropic.toml", "genai-prices-openai.toml"]
    assert check_dir(tmp_path) == []
    prices = load_dir(tmp_path)
    assert sum(result.added.values()) == len(prices) > 100
    assert all(p.source.startswith("genai-prices 0.2.5 (") for p in prices)
    book = PriceBook(prices)
    # Dated snapshot names reach their model through the names genai-prices matches.
    assert book.canonical_model("claude-haiku-5-5-20261007", None) == "claude-haiku-5-5"
    assert book.canonical_model("gpt-5.1-2025-11-13", None) == "gpt-5.1"
    at = datetime(2026, 12, 6, tzinfo=UTC)
    # Variants became tiers: processing=batch -> batch, service_tier X -> X.
    assert {"standard", "priority", "flex", "fast", "batch"} <= set(book.tiers("gpt-5.1"))
    assert {"standard", "batch"} <= set(book.tiers("claude-haiku-5-5"))
    # A model's first entry is effective from 2000-01-01, so older records can be repriced.
    old = book.resolve("gpt-5.1", "standard", datetime(2001, 1, 1, tzinfo=UTC))
    assert old is not None and old.price.effective_from == datetime(2000, 1, 1, tzinfo=UTC)
    # Thresholds became a band, 1-hour cache writes and the web search fee are kept.
    found = book.resolve("claude-haiku-5-5", "standard", at)
    assert found is not None
    haiku = found.price
    assert (haiku.cache_write_1h, haiku.web_search_per_1k) == (Decimal("0.2"), Decimal("10"))
    assert [b.above_input_tokens for b in haiku.bands] == [100_000]
    # 60,000 x 0.5 + 40,001 x 0.05 + 1,000 x 2.5 (all / 10^6): the whole request at the band.
    assert usd(price_tokens(haiku, Tokens(60_000, 40_001, 0, 1_000)).cost.total) == Decimal("0.03450005")
    # OpenAI bills no cache writes: the category takes the input price, never 0.
    found = book.resolve("gpt-5.1", "priority", at)
    assert found is not None and found.price.cache_write == found.price.input == Decimal("2.5")


def test_written_tables_price_as_genai_prices_does(data: Data, tmp_path: Path) -> None:
    import genai_prices  # the whole package, network updater and all: only to cross-check its arithmetic

    import_tables(data, tmp_path, providers=["anthropic"], today=TODAY)
    book = PriceBook(load_dir(tmp_path))
    at = datetime(2026, 12, 6, tzinfo=UTC)
    for model, (inp, read, write, out) in [("claude-haiku-5-5", (60_000, 40_001, 3_000, 1_000)),
                                           ("claude-sonnet-4-5", (150_000, 20_000, 40_000, 2_000)),
                                           ("claude-sonnet-4-5", (10, 20, 30, 40))]:
        found = book.resolve(model, "standard", at)
        assert found is not None
        mine = usd(price_tokens(found.price, Tokens(inp, read, write, out)).cost.total)
        usage = genai_prices.Usage(input_tokens=inp + read + write, cache_read_tokens=read,
                                   cache_write_tokens=write, output_tokens=out)
        theirs = genai_prices.calc_price(usage, model, provider_id="anthropic", genai_request_timestamp=at)
        assert mine == theirs.total_price, model


def test_a_second_import_changes_no_byte(data: Data, tmp_path: Path) -> None:
    import_tables(data, tmp_path, providers=["anthropic", "moonshotai"], today=TODAY)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    again = import_tables(data, tmp_path, providers=["anthropic", "moonshotai"], today=LATER)
    assert again.added == {} and again.unchanged > 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_changed_price_becomes_a_new_entry_from_the_import_date(data: Data, tmp_path: Path) -> None:
    import_tables(data, tmp_path, providers=["openai"], models=["gpt-5.1"], today=TODAY)
    table = tmp_path / "genai-prices-openai.toml"
    # As if gpt-5.1's standard price had been 1.00 when the table was written, and moved since.
    text = table.read_text()
    first = text.index('tier = "standard"')
    edited = text[:first] + text[first:].replace('input = "1.25"', 'input = "1.00"', 1)
    table.write_text(edited)
    result = import_tables(data, tmp_path, providers=["openai"], models=["gpt-5.1"], today=LATER)
    assert result.added == {"genai-prices-openai.toml": 1}
    after = table.read_text()
    assert after.startswith(edited)  # the published entry is never rewritten
    assert "effective_from = 2027-01-15T00:00:00Z" in after[len(edited):]
    book = PriceBook(load_dir(tmp_path))
    for at, want in ((datetime(2027, 1, 14, 23, tzinfo=UTC), "1.00"), (datetime(2027, 1, 15, tzinfo=UTC), "1.25")):
        found = book.resolve("gpt-5.1", "standard", at)
        assert found is not None and found.price.input == Decimal(want)
    # The other tiers did not change: nothing added for them, and a third import adds nothing.
    assert import_tables(data, tmp_path, providers=["openai"], models=["gpt-5.1"], today=LATER).added == {}
    assert table.read_text() == after


def test_what_the_price_model_cannot_hold_is_listed(data: Data, tmp_path: Path) -> None:
    result = import_tables(data, tmp_path, providers=["deepseek", "openai"], today=TODAY)
    lines = skipped(result)
    # DeepSeek's off-peak hours: no single price is right all day, so the model is left out.
    assert any(s.startswith("deepseek: deepseek-chat: time-of-day prices (00:30-16:30 UTC") for s in lines)
    book = PriceBook(load_dir(tmp_path))
    assert book.canonical_model("deepseek-chat", None) is None
    # Audio by the hour, storage searches: listed; a model with no token price at all: listed, not written.
    assert "openai: whisper-1: no input token price: nothing to price tokens at" in lines
    assert any(s.startswith("openai: gpt-5.1: prices by other units") and "storage_searches_kcount" in s
               for s in lines)
    assert book.canonical_model("whisper-1", None) is None
    assert book.canonical_model("gpt-5.1", None) == "gpt-5.1"


def test_more_than_ten_decimal_places_are_rounded_and_listed(data: Data, tmp_path: Path) -> None:
    result = import_tables(data, tmp_path, providers=["openrouter"], models=["google/gemini-2.5-flash"],
                           today=TODAY)
    assert any("cache_write_mtok 0.0833333333333333 has more than 10 decimal places: rounded half-even to "
               "0.0833333333" in s for s in skipped(result))
    found = PriceBook(load_dir(tmp_path)).resolve("google/gemini-2.5-flash", "standard",
                                                  datetime(2026, 12, 6, tzinfo=UTC))
    assert found is not None and found.price.cache_write == Decimal("0.0833333333")


def test_a_model_two_providers_price_differently_needs_upstream(data: Data, tmp_path: Path) -> None:
    # Anthropic and Google (Vertex AI) both list claude-haiku-4-5, at different prices.
    plain = tmp_path / "plain"
    result = import_tables(data, plain, providers=["anthropic", "google"], models=["claude-haiku-4-5"], today=TODAY)
    assert result.added == {}
    assert sorted(s for s in skipped(result) if "claimed at different prices" in s) == [
        f"{p}: claude-haiku-4-5: claimed at different prices by anthropic, google: give --upstream {p}=UPSTREAM "
        f"to price that upstream's traffic with {p}'s prices" for p in ("anthropic", "google")]
    mapped = tmp_path / "mapped"
    result = import_tables(data, mapped, providers=["anthropic", "google"], models=["claude-haiku-4-5"],
                           upstreams={"google": "vertex"}, today=TODAY)
    assert set(result.added) == {"genai-prices-anthropic.toml", "genai-prices-google.toml"}
    prices = load_dir(mapped)
    assert {p.upstream for p in prices if "provider google" in p.source} == {"vertex"}
    assert {p.upstream for p in prices if "provider anthropic" in p.source} == {None}
    book = PriceBook(prices)
    at = datetime(2026, 12, 6, tzinfo=UTC)
    direct, vertex = book.resolve("claude-haiku-4-5", "standard", at), \
        book.resolve("claude-haiku-4-5", "standard", at, upstream="vertex")
    assert direct is not None and vertex is not None
    assert direct.price.upstream is None and vertex.price.upstream == "vertex"


def test_an_entry_written_by_hand_keeps_its_model_and_tier(data: Data, tmp_path: Path) -> None:
    shutil.copy(Path(str(default_tables_dir())) / "kimi.toml", tmp_path)
    before = (tmp_path / "kimi.toml").read_bytes()
    result = import_tables(data, tmp_path, providers=["moonshotai"], today=TODAY)
    assert "moonshotai: kimi-k3.1-pro: standard: kept as written by hand in kimi.toml:4" in skipped(result)
    assert (tmp_path / "kimi.toml").read_bytes() == before
    found = PriceBook(load_dir(tmp_path)).resolve("kimi-k3.1-pro", "standard", datetime(2026, 12, 6, tzinfo=UTC))
    assert found is not None and found.price.cache_write_1h is None and found.price.file.endswith("kimi.toml")


def test_bad_arguments_are_refused(data: Data, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no provider 'nope'"):
        import_tables(data, tmp_path, providers=["nope"])
    with pytest.raises(ConfigError, match="--upstream names provider 'google'"):
        import_tables(data, tmp_path, providers=["anthropic"], upstreams={"google": "vertex"})
    r = run("import", "genai-prices", "--provider", "anthropic", "--upstream", "novalue", "--out", str(tmp_path))
    assert r.returncode == 2 and "write PROVIDER_ID=UPSTREAM_NAME" in r.stderr
    assert not any(tmp_path.iterdir())


def test_cli_import_prints_the_skipped_list_and_a_summary(tmp_path: Path) -> None:
    r = run("import", "genai-prices", "--provider", "deepseek", "--provider", "x-ai", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("skipped  deepseek: deepseek-reasoner: time-of-day prices") for line in lines)
    assert f"wrote    {tmp_path}/genai-prices-x-ai.toml" in r.stdout
    summary = lines[-1]
    assert summary.startswith(f"genai-prices 0.2.5 → {tmp_path}: ") and "time-of-day prices" in summary
    assert check_dir(tmp_path) == []


def test_diff_exit_codes(data: Data, tmp_path: Path) -> None:
    import_tables(data, tmp_path, providers=["anthropic"], today=TODAY)
    r = run("diff", str(tmp_path), "--against", "genai-prices")
    assert (r.returncode, r.stdout.splitlines()[-1]) == (0, "no differences"), r.stdout + r.stderr
    table = tmp_path / "genai-prices-anthropic.toml"
    text = table.read_text()
    # A band price edited (Haiku 5.5's 1-hour write over 100,000 tokens) ...
    haiku = text.index('model = "claude-haiku-5-5"\n')
    text = text[:haiku] + text[haiku:].replace('cache_write_1h = "1"\n', 'cache_write_1h = "1.5"\n', 1)
    # ... and an entry removed (Sonnet 4.5's batch tier): both reported.
    batch = text.index('model = "claude-sonnet-4-5"\ntier = "batch"')
    start, end = text.rindex("[[price]]", 0, batch), text.find("\n[[price]]\n", batch)
    text = text[:start] + (text[end + 1:] if end >= 0 else "")
    table.write_text(text)
    r = run("diff", str(tmp_path), "--against", "genai-prices", "--at", "2026-12-06")
    assert r.returncode == 1, r.stdout + r.stderr
    # Found by genai-prices' calculator: the first sample priced otherwise is named.
    assert "differs  claude-haiku-5-5 standard: 2000-01-01 00:00:00Z, 100,001 1-hour cache writes: llmmeter " \
           "$0.1500015, genai-prices $0.100001 (genai-prices anthropic)" in r.stdout
    assert "differs  claude-sonnet-4-5 batch: " in r.stdout  # priced at standard without its entry
    assert r.stdout.splitlines()[-1] == "2 differences"


def test_diff_lists_a_model_only_in_the_directory(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(
        '[[price]]\nmodel = "claude-haiku-5-5"\ntier = "standard"\neffective_from = 2026-01-01T00:00:00Z\n'
        'input = "0.1"\noutput = "0.5"\ncache_read = "0.01"\ncache_write = "0.125"\nsource = "by hand"\n\n'
        '[[price]]\nmodel = "in-house-model"\ntier = "standard"\neffective_from = 2026-01-01T00:00:00Z\n'
        'input = "1"\noutput = "1"\ncache_read = "1"\ncache_write = "1"\nsource = "by hand"\n')
    r = run("diff", str(tmp_path), "--against", "genai-prices")
    assert r.returncode == 1
    assert f"missing  in-house-model standard: only in {tmp_path} (mine.toml:" in r.stdout
    # By hand, Haiku 5.5 lacks the 1-hour write, the web search fee and the band genai-prices has.
    haiku = next(line for line in r.stdout.splitlines() if "claude-haiku-5-5 standard" in line)
    assert "cache_write_1h - → 0.2" in haiku and "web_search_per_1k - → 10" in haiku
    assert "band above 100,000 input-side tokens only in the second" in haiku


def test_the_shipped_tables_differ_only_where_written_by_hand() -> None:
    r = run("diff", "--against", "genai-prices", "--at", "2026-12-06")
    differing = [line for line in r.stdout.splitlines() if line.startswith(("differs", "missing"))]
    assert r.returncode == 1 and differing == [
        f"missing  kimi-k3.1-pro highspeed: only in {default_tables_dir()} (kimi.toml:15), not in genai-prices"]


@pytest.mark.parametrize(("regex", "glob"), [
    (r"^claude-haiku-5-5-\d{8}$", "claude-haiku-5-5-" + "[0-9]" * 8),
    (r"^claude-opus-5[-@]\d{8}$", "claude-opus-5[-@]" + "[0-9]" * 8),
    (r"^gpt-4\.1.*$", "gpt-4.1*"),
    ("gpt-4o", "*gpt-4o*"),
    (r"^a(b|c)$", None),
    (r"^a\w+$", None),
])
def test_regex_names_as_globs(regex: str, glob: str | None) -> None:
    assert regex_to_glob(regex) == glob
