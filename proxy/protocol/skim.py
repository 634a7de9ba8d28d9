"""Reading a few fields of a large JSON body without building the whole document.

orjson turns 31 MiB of `{}` elements into ten million dicts: about a gigabyte, and seconds
in one call that no other client's request can interrupt. The meter needs only a few fields
of a body (a request's model and limits, an answer's usage), so a body that could hold many
values is skimmed instead: ijson's C tokenizer reads it a slice at a time, the fields asked
for are kept, everything else is passed over, and the caller may pause between slices.

Sans-io: `skim` is a generator that yields between slices and returns what it kept; `run`
drives it to its end at once. A body small enough to be parsed whole is parsed with orjson,
as before, so the results for ordinary traffic do not change.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import ijson
from ijson.common import ObjectBuilder

# Up to this many JSON values (bounded from above on the bytes) a body is parsed whole: about
# 20 MB of Python objects and 20 ms of orjson at the worst, and what ordinary traffic needs.
WHOLE_VALUES = 1 << 18
SMALL = 256 * 1024  # a body this short holds fewer values than WHOLE_VALUES: no need to count them
COUNT_SLICE = 1 << 20  # bytes counted between pauses
SLICE = 16 * 1024  # bytes tokenised between pauses: at most ~11k events, a few milliseconds
MAX_DEPTH = 1024  # orjson's own limit: deeper bodies are refused on both paths alike
KEPT_VALUES = 4096  # values one kept object may hold; a larger one is not a report we can read
KEPT_NESTED = 1 << 16  # values kept at deeper paths in all: past it, no more are kept
TEXT_CAP = 4 * 1024 * 1024  # characters of text kept for estimating (as the stream tap keeps)

Steps = Generator[None, None, Any]
Path = tuple[str, ...]  # keys, with "item" for an array's elements (ijson's spelling)


class SkimError(ValueError):
    """The body is not valid JSON (or is nested deeper than MAX_DEPTH)."""


class NotAnObject(SkimError):
    """The body is JSON, but its root is no object."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """What to keep of a body whose root is an object."""

    scalars: frozenset[str] = frozenset()  # top-level keys whose scalar values are kept
    objects: frozenset[str] = frozenset()  # top-level keys whose (small) values are kept whole
    nested: frozenset[Path] = frozenset()  # deeper paths whose (small) values are kept, each occurrence
    texts: frozenset[Path] = frozenset()  # paths whose strings are kept as text, in order, up to TEXT_CAP
    marks: Mapping[Path, str] = field(default_factory=dict)  # a path whose string equals the value: marked


@dataclass(slots=True)
class Skimmed:
    top: dict[str, Any] = field(default_factory=dict)  # the kept top-level values (the last of a repeated key)
    nested: dict[Path, list[Any]] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    text_size: int = 0
    marks: set[Path] = field(default_factory=set)
    members: int = 0  # top-level members seen


def value_bound(body: bytes) -> int:
    """At least as many JSON values (keys included) as `body` holds: each but the root
    follows a `[`, a `,` or a `:`, and each key precedes a `:`."""
    return 1 + body.count(b"[") + body.count(b",") + 2 * body.count(b":")


def fits_whole(body: bytes, limit: int = WHOLE_VALUES) -> Generator[None, None, bool]:
    """Whether `body` may be parsed whole; counted a slice at a time, pausing between."""
    if len(body) <= SMALL and limit >= WHOLE_VALUES:
        return True
    view, n = memoryview(body), 1
    for start in range(0, len(body), COUNT_SLICE):
        piece = bytes(view[start:start + COUNT_SLICE])
        n += piece.count(b"[") + piece.count(b",") + 2 * piece.count(b":")
        if n > limit:
            return False
        yield
    return True


def skim(body: bytes, wanted: Wanted) -> Generator[None, None, Skimmed]:
    """Keep what `wanted` names of a JSON object, a slice at a time; raises SkimError."""
    try:
        return (yield from _skim(body, wanted, floats=True))
    except _Overflow:  # an integer beyond 64 bits, which orjson reads: again, with exact numbers
        return (yield from _skim(body, wanted, floats=False))


class _Overflow(Exception):
    pass


def _skim(body: bytes, wanted: Wanted, floats: bool) -> Generator[None, None, Skimmed]:
    out = Skimmed()
    events = ijson.sendable_list()
    # Floats are read as orjson reads them, and fast; yajl refuses an integer beyond 64 bits then.
    coro = ijson.basic_parse_coro(events, use_float=floats)
    walk = _Walk(wanted, out)
    view = memoryview(body)
    try:
        for start in range(0, len(body), SLICE):
            coro.send(bytes(view[start:start + SLICE]))
            walk.feed(events)
            del events[:]
            yield
        coro.close()  # raises on a truncated document
        walk.feed(events)
    except (ijson.JSONError, UnicodeDecodeError) as e:
        if floats and "integer overflow" in str(e):
            raise _Overflow from None
        raise SkimError(_first_line(e)) from None
    if not walk.rooted:
        raise SkimError("empty body")
    return out


class _Walk:
    """Follows the path of each event and keeps what is wanted."""

    __slots__ = ("builder", "built", "depth_kept", "kept_nested", "out", "path", "rooted", "target", "wanted")

    def __init__(self, wanted: Wanted, out: Skimmed) -> None:
        self.wanted, self.out = wanted, out
        self.path: list[str] = []
        self.rooted = False
        self.builder: ObjectBuilder | None = None  # a value being kept
        self.target: Path = ()
        self.built = 0  # values in it so far
        self.depth_kept = 0
        self.kept_nested = 0

    def feed(self, events: list[tuple[str, Any]]) -> None:
        path, wanted = self.path, self.wanted
        for event, value in events:
            if self.builder is not None:
                self._build(event, value)
                continue
            if event == "map_key":
                path[-1] = value
                if len(path) == 1:
                    self.out.members += 1
                continue
            if event == "end_map" or event == "end_array":
                path.pop()
                continue
            if not path:  # the root
                if event != "start_map":
                    raise NotAnObject("the body is not a JSON object")
                self.rooted = True
                path.append("")
                continue
            opens = event == "start_map" or event == "start_array"
            if len(path) == 1:
                key = path[0]
                if opens and key in wanted.objects:
                    self._start(event, (key,))
                    continue
                if not opens and key in wanted.scalars:
                    self.out.top[key] = value
                else:  # a repeated key: the last value counts, as with orjson
                    self.out.top.pop(key, None)
            elif opens and wanted.nested and self.kept_nested < KEPT_NESTED and tuple(path) in wanted.nested:
                self._start(event, tuple(path))
                continue
            elif event == "string" and (wanted.texts or wanted.marks):
                self._string(tuple(path), value)
            if opens:
                if len(path) >= MAX_DEPTH:
                    raise SkimError(f"nested deeper than {MAX_DEPTH}")
                path.append("item" if event == "start_array" else "")

    def _string(self, at: Path, value: str) -> None:
        out, wanted = self.out, self.wanted
        if at in wanted.texts and value and out.text_size < TEXT_CAP:
            piece = value[:TEXT_CAP - out.text_size]
            out.texts.append(piece)
            out.text_size += len(piece)
        mark = wanted.marks.get(at)
        if mark is not None and value == mark:
            out.marks.add(at)

    def _start(self, event: str, at: Path) -> None:
        self.builder, self.target, self.built, self.depth_kept = ObjectBuilder(), at, 0, 0
        self._build(event, None)

    def _build(self, event: str, value: Any) -> None:
        builder = self.builder
        assert builder is not None
        self.built += 1
        if self.built <= KEPT_VALUES:
            builder.event(event, value)
        if event == "start_map" or event == "start_array":
            self.depth_kept += 1
            if len(self.path) + self.depth_kept > MAX_DEPTH:
                raise SkimError(f"nested deeper than {MAX_DEPTH}")
        elif event == "end_map" or event == "end_array":
            self.depth_kept -= 1
        if self.depth_kept:
            return
        self.builder = None
        if self.built > KEPT_VALUES:  # too large to be what was asked for: as if absent
            if len(self.target) == 1:
                self.out.top.pop(self.target[0], None)
            return
        kept = _as_orjson(builder.value)
        if len(self.target) == 1:
            self.out.top[self.target[0]] = kept
        else:
            self.kept_nested += self.built
            self.out.nested.setdefault(self.target, []).append(kept)


def _first_line(e: Exception) -> str:
    """yajl's message without the excerpt of the body it quotes on the next lines."""
    said = e.args[0] if e.args else e
    text = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
    return text.strip().split("\n", 1)[0]


_INT64 = (-(1 << 63), (1 << 64) - 1)


def _as_orjson(v: Any) -> Any:
    """A kept value as orjson reads it: a decimal, or an integer beyond 64 bits, is a float."""
    if isinstance(v, dict):
        return {k: _as_orjson(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_as_orjson(x) for x in v]
    if (type(v) is int and not _INT64[0] <= v <= _INT64[1]) or isinstance(v, Decimal):
        return float(v)
    return v


def run(steps: Generator[None, None, Any]) -> Any:
    """Drive a skim (or a count) to its end without pausing."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
