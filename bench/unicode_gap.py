"""Find the code points where `regex` and tiktoken disagree on Unicode classes.

Sweeps every code point through tiktoken and through proxy.metering.estimate.compact with tiktoken's pattern
unchanged, prints the ranges that count differently (the table for
`proxy.metering.estimate.compact._UNASSIGNED_FOR_TIKTOKEN`), then checks the narrowed pattern on the same
sweep. Needs tiktoken's vocabularies; takes about three minutes per encoding.

    python bench/unicode_gap.py [--encoding o200k_base]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.metering.estimate.compact import CompactBpe, compile_pattern
from proxy.metering.estimate.estimator import VOCABULARIES, Estimator, TiktokenCounter


def probe(ch: str) -> str:
    # Each class boundary the patterns draw, with the character on either side of it.
    return f"a{ch}a {ch}1'll\n{ch} A{ch}'S {ch}{ch}\t{ch}"


def mismatches(name: str, counter: CompactBpe, reference: TiktokenCounter) -> list[int]:
    enc = reference.encoding
    return [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000
            and counter.count(probe(chr(cp))) != len(enc.encode_ordinary(probe(chr(cp))))]


def ranges(cps: list[int]) -> str:
    spans: list[list[int]] = []
    for cp in cps:
        if spans and spans[-1][1] == cp - 1:
            spans[-1][1] = cp
        else:
            spans.append([cp, cp])
    return " ".join(f"{a:X}" if a == b else f"{a:X}-{b:X}" for a, b in spans)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoding", default="o200k_base", choices=sorted(VOCABULARIES))
    name = ap.parse_args().encoding
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", tempfile.mkdtemp(prefix="llmmeter-tiktoken-"))
    reference = Estimator(name, engine="tiktoken").load(name)
    assert isinstance(reference, TiktokenCounter)
    sha = VOCABULARIES[name].sha256
    raw = mismatches(name, CompactBpe(name, sha, compile_pattern(name, [])), reference)
    print(f"{name}: {len(raw)} code points differ with tiktoken's pattern unchanged:")
    print(ranges(raw))
    left = mismatches(name, CompactBpe(name, sha), reference)
    print(f"with the table in proxy/metering/estimate/compact.py: {len(left)} differ {ranges(left)}")
    sys.exit(1 if left else 0)


if __name__ == "__main__":
    main()
