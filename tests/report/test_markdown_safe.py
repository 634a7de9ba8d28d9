"""A model name is the client's free text: in the Markdown report it reads as itself, never as
HTML, a link, an image or emphasis, once a renderer (Python-Markdown, as MkDocs and many wikis
use) turns the report into a page. From a real SQLite ledger."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import markdown  # the renderer MkDocs uses, from the test lock

from proxy.report import render
from tests.report.test_unknown_cost import PROD, build, rec

HOSTILE = ('[pay here](https://evil.example/x)<img src=x onerror=alert(1)>*boom* `code` '
           '![i](https://evil.example/p.png) a&amp;b')


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs


def test_a_hostile_model_name_is_text_in_the_rendered_markdown(tmp_path: Path) -> None:
    md = render(build(tmp_path, [*PROD, rec("h1", HOSTILE, "prod", None)]), "md")
    page = markdown.markdown(md, extensions=["tables"])
    tags = Tags()
    tags.feed(page)
    assert not {"img", "em", "code"} & set(tags.tags), tags.tags
    # The report's own links: anchors and in-page links to its sections; none is the client's.
    assert all("evil" not in (value or "") and name != "onerror" for name, value in tags.attrs), tags.attrs
    assert all(value.startswith(("#", "docs/report.md#", "https://github.com/pydantic/genai-prices/"))
               for name, value in tags.attrs if name == "href" and value), tags.attrs
    # Bold is the report's own (the headline and the totals rows), never inside a model's cell.
    assert all("evil" not in cell for cell in re.findall(r"<strong>(.*?)</strong>", page))
    # The name reads exactly as the client sent it, in the unpriced list and in the model's rows.
    shown = HOSTILE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert page.count(shown) >= 3, page
