"""docs/configuration.md's complete file loads as written, and its list of commands that take
--db, --config and --prices is the parser's."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from proxy.cli import _parser
from proxy.settings import load, resolve_api_keys

DOC = Path(__file__).parents[1] / "docs" / "configuration.md"


def complete_file() -> str:
    text = DOC.read_text()
    section = text.split("\n## A complete file\n", 1)[1]
    m = re.search(r"```toml\n(.*?)```", section, re.S)
    assert m is not None, "no toml block under 'A complete file'"
    return m.group(1)


def test_the_complete_file_loads_as_written(tmp_path: Path) -> None:
    path = tmp_path / "llmmeter.toml"
    path.write_text(complete_file())
    s = resolve_api_keys(load(path, env={}), env={"MOONSHOT_API_KEY": "sk-m"})
    assert [u.name for u in s.upstreams] == ["selfhosted", "moonshot"]
    assert [t.name for t in s.tenants] == ["search-team"] and s.keys_required
    assert s.tags == ("rag-search",)


def commands_taking(flag: str) -> set[str]:
    """Every command (`prices check`, `report`, ...) whose parser has `flag`."""
    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if flag in action.option_strings:
                found.add(name)
            if isinstance(action, argparse._SubParsersAction):
                for sub, p in action.choices.items():
                    walk(p, f"{name} {sub}".strip())

    walk(_parser(), "")
    return found


def documented(flag: str) -> set[str]:
    text = DOC.read_text()
    m = re.search(rf"^- `{re.escape(flag)}`: (.*)$", text, re.M)
    assert m is not None, f"docs/configuration.md lists no commands taking {flag}"
    return set(re.findall(r"`([a-z ]+)`", m.group(1)))


def test_the_commands_documented_to_take_each_flag_are_the_parsers() -> None:
    for flag in ("--db", "--config", "--prices"):
        assert documented(flag) == commands_taking(flag), flag
