"""Which price tables a command reads, and why: the `prices` commands check what `serve` uses."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

from pricing import default_tables_dir
from proxy import settings as config


@dataclass(frozen=True, slots=True)
class TablesInUse:
    directory: Path | Traversable
    origin: str  # in words: the argument, the variable, the config file or the shipped tables

    def __str__(self) -> str:
        return f"{self.directory} ({self.origin})"


def tables_in_use(config_file: Path | None, given: Path | None,
                  env: Mapping[str, str] | None = None) -> TablesInUse:
    """The directory `serve` would price with, by the same precedence (argument > LLMMETER_PRICES >
    `[pricing] dir` > the shipped tables); the config is loaded whole, as `serve` loads it."""
    env = os.environ if env is None else env
    if given is not None:
        return TablesInUse(given, "given on the command line")
    path = config_file or config.default_config_path(env)
    s = config.load(path, env=env)
    if s.prices_dir is None:
        return TablesInUse(default_tables_dir(), "the shipped tables")
    if env.get("LLMMETER_PRICES"):
        return TablesInUse(s.prices_dir, "from LLMMETER_PRICES")
    return TablesInUse(s.prices_dir, f"[pricing] dir in {path}")
