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
class Table:
    columns: list[str]
    rows: list[list]  # of str or Link
    tones: list[str] = field(default_factory=list)  # per row, "" for none
    nowrap: tuple[str, ...] = ()  # columns whose cells must not wrap (an effect and its interval)


@dataclass
class Image:
    name: str  # the PNG's file name beside the page
    png: bytes


Block = Union[Heading, Items, Table, Image]


@dataclass
class Page:
    title: str
    blocks: list[Block]


# Text (and its headers) left-aligned, numbers right-aligned; a table wider than the page scrolls inside its
# own box instead of widening the page.
STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:110em}div.t{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;font-size:.9em;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top;overflow-wrap:break-word}"
    "th{background:#f3f3f3;min-width:4em}td.n{text-align:right}td.nw{white-space:nowrap}"
    "img{max-width:100%;margin:1em 0}code{background:#f3f3f3}"
    "tr.held{background:#d9f2d9}tr.contradicted{background:#f7d4d4}tr.equivalent{background:#dde6f7}"
)
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
        f"[{v.text}]({v.href})" if isinstance(v, Link) else v.replace("|", "\\|").replace("\n", " ") for v in values
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
    if nowrap:
        return " class='nw'"
    return " class='n'" if isinstance(v, str) and NUMBER.match(v.strip()) else ""


def _tone(tone: str) -> str:
    return f" class='{html.escape(tone)}'" if tone else ""


def _html_cell(v, nowrap: bool = False) -> str:
    if isinstance(v, Link):
        return f"<a href='{html.escape(v.href)}'>{html.escape(v.text)}</a>"
    return (
        html.escape(v) if nowrap else html.escape(v).replace(",", ",<wbr>")
    )  # a list of seeds may break after a comma


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
