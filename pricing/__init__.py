"""Price model, loader and exact calculator. Pure: no I/O beyond reading the tables."""

from pricing.book import PriceBook, Resolution
from pricing.calculator import UNITS_PER_USD, Cost, cost, format_usd, unit_price, usd
from pricing.loader import PriceTableError, check_dir, default_tables_dir, load_dir
from pricing.model import BUILTIN_TIER_ALIASES, TOKEN_TYPES, Price

__all__ = [
    "BUILTIN_TIER_ALIASES", "TOKEN_TYPES", "UNITS_PER_USD", "Cost", "Price", "PriceBook", "PriceTableError",
    "Resolution", "check_dir", "cost", "default_tables_dir", "format_usd", "load_dir", "unit_price", "usd",
]
