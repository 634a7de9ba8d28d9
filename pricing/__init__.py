"""Price model, loader and exact calculator. Pure: no I/O beyond reading the tables."""

from pricing.book import PriceBook, Resolution
from pricing.calculator import (
    UNITS_PER_USD,
    Cost,
    Priced,
    Tokens,
    cost,
    format_usd,
    price_parts,
    price_tokens,
    token_rate,
    usd,
)
from pricing.loader import PriceTableError, check_dir, default_tables_dir, load_dir
from pricing.model import BILLING_TYPES, BUILTIN_TIER_ALIASES, FEE_TYPES, TOKEN_TYPES, Band, Price

__all__ = [
    "BILLING_TYPES", "BUILTIN_TIER_ALIASES", "FEE_TYPES", "TOKEN_TYPES", "UNITS_PER_USD", "Band", "Cost", "Price",
    "PriceBook", "PriceTableError", "Priced", "Resolution", "Tokens", "check_dir", "cost", "default_tables_dir",
    "format_usd", "load_dir", "price_parts", "price_tokens", "token_rate", "usd",
]
