"""Text a client chose (a model name, an id), written into a Markdown table cell so it reads as itself.

Markdown reads `<` as the start of raw HTML (which most renderers keep) or of an autolink,
`[` and `!` as a link or an image, `*` and a backtick as emphasis or code, `|` as the next
cell. `<`, `>` and `&` are written as entities and the rest behind a backslash: both
CommonMark and Python-Markdown read these as the character itself. `_` is left as it is:
names and zones are full of it (`America/Sao_Paulo`), and inside a word it starts nothing.
"""

from __future__ import annotations

_MARKUP = str.maketrans({"\\": "\\\\", "|": "\\|", "\n": " ", "\r": " ", "&": "&amp;", "<": "&lt;", ">": "&gt;",
                         "[": "\\[", "]": "\\]", "*": "\\*", "`": "\\`", "!": "\\!"})


def md_cell(text: str) -> str:
    """`text` as a table cell: it cannot break the table, start a link or image, or be HTML."""
    return text.translate(_MARKUP)
