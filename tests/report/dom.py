"""A small reading of an HTML page: its tables, its charts and the text a person sees."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Chart:
    name: str
    texts: dict[str, list[str]] = field(default_factory=dict)  # class -> the texts of <text class=...>
    titles: list[str] = field(default_factory=list)  # hover texts
    marks: int = 0  # rect/polyline/circle with a hover title


@dataclass
class Table:
    section: str
    headers: list[str] = field(default_factory=list)
    rows: list[list[tuple[str, str]]] = field(default_factory=list)  # (class, text) per cell
    total: list[str] = field(default_factory=list)


VOID = frozenset({"br", "meta", "img", "hr", "input", "link", "wbr"})
MARKS = ("rect", "circle", "polyline")


class Page(HTMLParser):
    """Parses once; works on our own output and on Chromium's --dump-dom alike."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: list[Table] = []
        self.charts: list[Chart] = []
        self.visible: list[str] = []
        self.links: list[str] = []  # every <a href>, as written
        self.ids: set[str] = set()  # every id, what a `#...` link can reach
        self._stack: list[tuple[str, dict[str, str]]] = []
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag == "svg" and "data-chart" in a:
            self.charts.append(Chart(a["data-chart"]))
        elif tag == "table":
            self.tables.append(Table(a.get("data-section", "")))
        elif tag == "tr" and self.tables:
            self.tables[-1].rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        if tag not in VOID:
            self._stack.append((tag, a))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass  # <line .../>: nothing inside, nothing to read

    def handle_endtag(self, tag: str) -> None:
        if tag not in (t for t, _ in self._stack):
            return
        while True:
            open_tag, a = self._stack.pop()
            if open_tag == tag:
                break
        if tag in ("td", "th") and self._cell is not None and self.tables:
            text = " ".join(" ".join(self._cell).split())
            table = self.tables[-1]
            if self._inside("thead"):
                table.headers.append(text)
            else:
                table.rows[-1].append((a.get("class", ""), text))
            self._cell = None
        elif tag == "tr" and self.tables and self._inside("tfoot"):
            self.tables[-1].total = [t for _, t in self.tables[-1].rows.pop()]
        elif tag == "tr" and self.tables and self._inside("thead"):
            self.tables[-1].rows.pop()

    def handle_data(self, data: str) -> None:
        tags = [t for t, _ in self._stack]
        if "style" in tags or "script" in tags:
            return
        if self._cell is not None:
            self._cell.append(data)
        if tags and tags[-1] == "title":
            if len(tags) > 1 and tags[-2] in MARKS and self.charts:
                self.charts[-1].titles.append(data)
                self.charts[-1].marks += 1
            return  # a hover text, not on the page
        if tags and tags[-1] == "text" and self.charts and "svg" in tags:
            for cls in self._stack[-1][1].get("class", "").split():
                self.charts[-1].texts.setdefault(cls, []).append(data)
        if data.strip():
            self.visible.append(data.strip())

    def _inside(self, tag: str) -> bool:
        return any(t == tag for t, _ in self._stack)

    @property
    def text(self) -> str:
        return " ".join(self.visible)
