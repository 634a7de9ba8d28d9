"""Imported prices against genai-prices' own calculator (pricing/genai_verify.py): the
differential test of the importer over every provider of the pinned release, the shipped tables,
and each class of error the verification exists to catch, on the real package data."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import genai_prices
import pytest

from pricing import PriceBook, Tokens, default_tables_dir, load_dir, price_tokens, usd
from pricing.genai import diff_tables, import_tables
from pricing.genai_data import Data, load
from pricing.genai_verify import verify

TODAY = date(2026, 12, 6)


@pytest.fixture(scope="module")
def data() -> Data:
    return load()


@pytest.fixture(scope="module")
def everything(data: Data, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("all")
    import_tables(data, out, today=TODAY)
    return out


def cost(book: PriceBook, name: str, tier: str, at: datetime, tokens: Tokens) -> Decimal | None:
    model = book.canonical_model(name, None)
    if model is None:
        return None
    found = book.resolve(model, book.resolve_tier(name, [tier], model=model, at=at), at)
    return None if found is None else usd(price_tokens(found.price, tokens).cost.total)


def theirs(name: str, provider: str, ctx: dict[str, str] | None, at: datetime, tokens: Tokens) -> Decimal:
    usage = genai_prices.Usage(input_tokens=tokens.input, output_tokens=tokens.output)
    total: Decimal = genai_prices.calc_price(usage, name, provider_id=provider, genai_request_timestamp=at,
                                             price_context=ctx).total_price
    return total


def test_a_fresh_import_of_every_provider_passes_the_verification(data: Data, everything: Path) -> None:
    # The differential test of the importer: every entry it wrote, over every provider of the
    # pinned release, priced as genai-prices' calculator prices it at every sample.
    prices = load_dir(everything)
    assert len({p.source.split("provider ")[1].split(",")[0] for p in prices}) > 20
    checked = verify(data, prices)
    assert checked.mismatches == []
    # Embedding models are written (output at the input price, never 0) and named as filled.
    assert {"text-embedding-3-small", "text-embedding-ada-002", "codestral-embed-2505", "voyage-3"} <= \
        {f.model for f in checked.filled if f.categories == ("output",)}
    # `prices diff` runs the same verification: right after an import, nothing differs, and
    # what the import skipped is listed as skipped.
    found, notes = diff_tables(data, everything, datetime(2026, 12, 6, tzinfo=UTC))
    assert found == []
    assert any(n.startswith("skipped  perplexity: sonar: its price has parts an entry cannot hold: a per-request "
                            "fee") for n in notes)


def test_the_shipped_tables_pass_the_verification(data: Data) -> None:
    checked = verify(data, load_dir(default_tables_dir()))
    assert checked.mismatches == []
    # Embedding models are in them, their output at the input price (SPEC: never 0).
    filled = {f.model for f in checked.filled}
    assert {"text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002",
            "codestral-embed-2505"} <= filled


def test_a_dated_variant_applies_from_its_own_start_date(data: Data, tmp_path: Path) -> None:
    import_tables(data, tmp_path, providers=["openai", "google"],
                  models=["gpt-6.2-astra", "gemini-3.8-flash-tts", "o1-pro"], today=TODAY)
    book = PriceBook(load_dir(tmp_path))
    now = datetime(2026, 12, 6, tzinfo=UTC)
    small = Tokens(10_000, 0, 0, 1_000)
    # gpt-6.2-astra ultrafast: $24/M today, $48/M only from 2027-03-01.
    for at in (now, datetime(2027, 3, 1, tzinfo=UTC)):
        assert cost(book, "gpt-6.2-astra", "ultrafast", at, small) == \
            theirs("gpt-6.2-astra", "openai", {"service_tier": "ultrafast"}, at, small)
    assert cost(book, "gpt-6.2-astra", "ultrafast", now, small) == Decimal("0.36")
    # gemini-3.8-flash-tts: priority, batch and flex at their 2026-10-15 prices until 2027.
    for tier, ctx in (("priority", {"service_tier": "priority"}), ("batch", {"processing": "batch"}),
                      ("flex", {"service_tier": "flex"})):
        assert cost(book, "gemini-3.8-flash-tts", tier, now, small) == \
            theirs("gemini-3.8-flash-tts", "google", ctx, now, small), tier
    # o1-pro batch starts 2026-10-14: the day before, a batch request costs the standard price.
    before = datetime(2026, 10, 13, 12, tzinfo=UTC)
    usage = Tokens(123_456, 0, 0, 231_543)
    assert cost(book, "o1-pro", "batch", before, usage) == \
        theirs("o1-pro", "openai", {"processing": "batch"}, before, usage) == Decimal("157.4442")


def test_no_name_is_priced_as_another_providers_model(data: Data, everything: Path) -> None:
    book = PriceBook(load_dir(everything))
    # Anthropic's and Vertex AI's claude-opus-4-5 differ, so the id is unpriced until --upstream
    # says which is which; Bedrock's regional model never takes the name over.
    assert book.canonical_model("claude-opus-4-5", None) is None
    assert book.canonical_model("claude-opus-4-5-20251101", None) != "regional.anthropic.claude-opus-4-5-v1:0"


def test_prices_an_entry_cannot_hold_are_skipped_with_the_reason(data: Data, tmp_path: Path) -> None:
    result = import_tables(data, tmp_path, providers=["perplexity"], today=TODAY)
    lines = [str(s) for s in result.skipped]
    assert "perplexity: sonar: its price has parts an entry cannot hold: a per-request fee ($12 per 1,000 " \
           "requests); left out rather than written underpriced" in lines
    assert any(s.startswith("perplexity: sonar-deep-research: its price has parts an entry cannot hold: token "
                            "rates of their own (output_citation_mtok, output_reasoning_mtok)") for s in lines)
    book = PriceBook(load_dir(tmp_path)) if any(tmp_path.iterdir()) else PriceBook([])
    assert book.canonical_model("sonar", None) is None and book.canonical_model("sonar-deep-research", None) is None


def test_the_verification_catches_a_tier_dated_too_early(data: Data, tmp_path: Path) -> None:
    import_tables(data, tmp_path, providers=["openai"], models=["o1-pro"], today=TODAY)
    table = tmp_path / "genai-prices-openai.toml"
    text = table.read_text()
    assert "effective_from = 2026-10-14T00:00:00Z" in text
    table.write_text(text.replace("effective_from = 2026-10-14T00:00:00Z", "effective_from = 2000-01-01T00:00:00Z"))
    found = verify(data, load_dir(tmp_path)).mismatches
    assert [(f.model, f.tier) for f in found] == [("o1-pro", "batch")]
    assert found[0].what == ("2000-01-01 00:00:00Z, 98,765 input tokens ({'processing': 'batch'}): "
                             "llmmeter $7.407375, genai-prices $14.81475")
    r = subprocess.run([sys.executable, "-m", "proxy", "prices", "diff", str(tmp_path), "--against",
                        "genai-prices"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "differs  o1-pro batch: " in r.stdout, r.stdout + r.stderr


def test_an_embedding_model_is_imported_with_output_at_the_input_price(data: Data, tmp_path: Path) -> None:
    # genai-prices has only an input price for embedding models; its calculator bills output at 0.
    # SPEC: a category the data lacks takes the input price, never 0. The verification compares
    # what genai-prices prices and names the filled category instead of dropping the model.
    result = import_tables(data, tmp_path, providers=["openai", "mistral"],
                           models=["text-embedding-3-small", "codestral-embed-2505"], today=TODAY)
    assert result.skipped == []
    assert [str(f) for f in result.filled] == [
        "mistral: codestral-embed-2505: output filled with the input price (genai-prices has none; its calculator "
        "bills it at 0): not compared with genai-prices",
        "openai: text-embedding-3-small: output filled with the input price (genai-prices has none; its calculator "
        "bills it at 0): not compared with genai-prices"]
    prices = load_dir(tmp_path)
    small = [p for p in prices if p.model == "text-embedding-3-small"]
    assert [(p.tier, p.input, p.output, p.cache_read, p.cache_write) for p in small] == \
        [("standard", Decimal("0.02"), Decimal("0.02"), Decimal("0.02"), Decimal("0.02"))]
    checked = verify(data, prices)
    assert checked.mismatches == []
    assert [(f.model, f.categories) for f in checked.filled] == [("codestral-embed-2505", ("output",)),
                                                                  ("text-embedding-3-small", ("output",))]
    book = PriceBook(prices)
    now = datetime(2026, 12, 6, tzinfo=UTC)
    # Input alone is exactly genai-prices' price; output costs the input price, never 0.
    assert cost(book, "text-embedding-3-small", "standard", now, Tokens(1_000_000, 0, 0, 0)) == \
        theirs("text-embedding-3-small", "openai", None, now, Tokens(1_000_000, 0, 0, 0)) == Decimal("0.02")
    assert cost(book, "text-embedding-3-small", "standard", now, Tokens(0, 0, 0, 1_000_000)) == Decimal("0.02")
    found, notes = diff_tables(data, tmp_path, now)
    assert [d for d in found if not d.what.startswith("only in")] == []  # the rest: models not imported here
    assert "filled   openai: text-embedding-3-small: output filled with the input price (genai-prices has none; " \
           "its calculator bills it at 0): not compared with genai-prices" in notes
    # An output price other than the input price is still caught, against the input price.
    table = tmp_path / "genai-prices-openai.toml"
    table.write_text(table.read_text().replace('output = "0.02"', 'output = "0"'))
    found_after = verify(data, load_dir(table.parent)).mismatches
    assert [(f.model, f.tier) for f in found_after] == [("text-embedding-3-small", "standard")]
