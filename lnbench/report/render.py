"""The one renderer of lnbench's pages (`lnbench report`'s report, `lnbench check`'s page): a page is a list
of blocks (heading, list, table, image) rendered as Markdown, as one self-contained HTML file, or as the
terminal's summary, so that the formats never say different things.

List items may use Markdown's `code` and **bold**: the HTML keeps them as <code> and <b>, the terminal
drops the marks. A table row may carry a tone (a verdict: held, contradicted, equivalent) that the HTML
shows as the row's colour; a cell may be a Link.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from typing import Union


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Items:
    items: list[str]


@dataclass
class Link:
    text: str
    href: str


@dataclass
class Detail:
    """A cell's short text and what the HTML folds under it (a verdict's reason: unfolded, a verdict cell was a
    dozen lines high); the Markdown and the terminal say both, as `text (more)`."""

    text: str
    more: str = ""

    def __str__(self) -> str:
        return f"{self.text} ({self.more})" if self.more else self.text


@dataclass
class Table:
    columns: list[str]
    rows: list[list]  # of str, Link or Detail
    tones: list[str] = field(default_factory=list)  # per row, "" for none
    nowrap: tuple[str, ...] = ()  # columns whose intervals ([low, high]) must not break (an effect's)


@dataclass
class Image:
    name: str  # the PNG's file name beside the page
    png: bytes


Block = Union[Heading, Items, Table, Image]


@dataclass
class Page:
    title: str
    blocks: list[Block]


# Text (and its headers) left-aligned, numbers right-aligned. A table shrinks to the window: every cell may break
# between words (an identifier after its _ and ., a list after its commas; an interval stays whole), so that
# the check's 13 columns fit in a laptop's 1,280 px (tests/check/test_page_layout.py); a table that still cannot
# (a word longer than its column) scrolls inside its own box instead of widening the page.
STYLE = (
    "body{font-family:sans-serif;margin:1.5em;max-width:110em}div.t{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;font-size:.85em;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:.25em .4em;text-align:left;vertical-align:top;overflow-wrap:break-word}"
    "th{background:#f3f3f3}td.n{text-align:right}span.nw{white-space:nowrap}details{font-size:.9em;color:#444}summary{cursor:pointer}"
    "img{max-width:100%;margin:1em 0}code{background:#f3f3f3}"
    "tr.held{background:#d9f2d9}tr.contradicted{background:#f7d4d4}tr.equivalent{background:#dde6f7}"
)
BREAKS = re.compile(r"(?<=[,_/])(?!\s)|(?<=[A-Za-z0-9]\.)(?=[A-Za-z])")  # where a word may break: , _ / and .name
NUMBER = re.compile(r"^[-+±—]?[0-9.,]*[0-9—]([eE][-+]?[0-9]+)?( ± [0-9.eE+-]+)?%?$")


# ---- Markdown -------------------------------------------------------------------------------------
def markdown(page: Page) -> str:
    return "\n\n".join(map(markdown_block, page.blocks)) + "\n"


def markdown_block(block: Block) -> str:
    if isinstance(block, Heading):
        return "#" * block.level + " " + block.text
    if isinstance(block, Items):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Image):
        return f"![{block.name}]({block.name})"
    return "\n".join([_md_row(block.columns), _md_row(["---"] * len(block.columns)), *map(_md_row, block.rows)])


def _md_row(values: list) -> str:
    cells = (
        f"[{v.text}]({v.href})" if isinstance(v, Link) else str(v).replace("|", "\\|").replace("\n", " ")
        for v in values
    )
    return "| " + " | ".join(cells) + " |"


# ---- HTML -----------------------------------------------------------------------------------------
def html_page(page: Page) -> str:
    head = f"<!doctype html><meta charset='utf-8'><title>{html.escape(page.title)}</title><style>{STYLE}</style>"
    return "\n".join([head, *map(_html_block, page.blocks)]) + "\n"


def _html_block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{html.escape(block.text)}</h{block.level}>"
    if isinstance(block, Items):
        return "<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Image):
        return (
            f"<img alt='{html.escape(block.name)}' src='data:image/png;base64,{base64.b64encode(block.png).decode()}'>"
        )
    head = "".join(f"<th>{html.escape(c)}</th>" for c in block.columns)
    tones = block.tones or [""] * len(block.rows)
    nowrap = [c in block.nowrap for c in block.columns]
    body = "".join(
        f"<tr{_tone(t)}>"
        + "".join(f"<td{_cell_class(v, nw)}>{_html_cell(v, nw)}</td>" for v, nw in zip(row, nowrap))
        + "</tr>"
        for row, t in zip(block.rows, tones)
    )
    return f"<div class='t'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _cell_class(v, nowrap: bool) -> str:
    return " class='n'" if isinstance(v, str) and not nowrap and NUMBER.match(v.strip()) else ""


def _tone(tone: str) -> str:
    return f" class='{html.escape(tone)}'" if tone else ""


def _html_cell(v, nowrap: bool = False) -> str:
    if isinstance(v, Link):
        return f"<a href='{html.escape(v.href)}'>{html.escape(v.text)}</a>"
    if isinstance(v, Detail):
        more = f" <details><summary>why</summary>{_html_cell(v.more)}</details>" if v.more else ""
        return _html_cell(v.text) + more
    if nowrap:  # an interval stays whole; the text around it breaks between words
        return re.sub(r"\[[^\]]*\]", r"<span class='nw'>\g<0></span>", html.escape(v))
    return "<wbr>".join(html.escape(part) for part in BREAKS.split(v))


def _inline(text: str) -> str:
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)


# ---- the terminal ---------------------------------------------------------------------------------
def terminal(blocks: list[Block]) -> str:
    """Tables as Markdown (they read well in a terminal), headings as `Title:` right above their list, items
    indented without their marks; images are left out (the command prints their paths)."""
    out: list[str] = []
    for prev, block in zip([None, *blocks], blocks):
        if isinstance(block, Image):
            continue
        if out:
            out.append("\n" if isinstance(prev, Heading) else "\n\n")
        if isinstance(block, Heading):
            out.append(f"{block.text}:")
        elif isinstance(block, Items):
            out.append("\n".join(f"  - {plain(item)}" for item in block.items))
        else:
            out.append(markdown_block(block))
    return "".join(out) + "\n"


def plain(text: str) -> str:
    return text.replace("`", "").replace("**", "")
