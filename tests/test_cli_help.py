"""Every flag of every command says what it takes and, unless it must be given, its default; the
fake upstream says where it listens. Walks the real argparse tree, so a new flag without help fails."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

from proxy.cli import _parser

ROOT = Path(__file__).resolve().parents[1]


def commands(p: argparse.ArgumentParser, name: str = "llmmeter") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from commands(child, f"{name} {sub}")


def test_every_flag_has_a_help_line_with_its_default() -> None:
    missing, no_default = [], []
    for name, p in commands(_parser()):
        for a in p._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            flag = f"{name} {'/'.join(a.option_strings) or a.dest}"
            if not a.help or a.help == argparse.SUPPRESS:
                missing.append(flag)
            elif a.option_strings and not a.required and "default" not in a.help:
                no_default.append(flag)
    assert missing == [] and no_default == []


def test_export_help_names_the_formats() -> None:
    text = _parser()._subparsers._group_actions[0].choices["export"].format_help()  # type: ignore[union-attr]
    for words in ("YYYY-MM-DD", "RFC 3339", "exclusive", "(default: UTC)", "(default: csv)"):
        assert words in " ".join(text.split()), words


def test_the_fake_upstream_says_where_it_listens() -> None:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_upstream.py"), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the line, or '' if the process ended
        assert line.startswith("fake upstream listening on http://127.0.0.1:"), line
        base_url = line.split()[4]
        assert base_url.endswith("/v1")
        assert httpx.get(base_url + "/models", timeout=10).json()["object"] == "list"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
