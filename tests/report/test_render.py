"""One renderer for every page (issue 24): the same blocks give the Markdown, the HTML and the terminal's
summary, so the formats cannot drift apart; the check page and the report both go through it."""

from lnbench.report import render
from lnbench.report.render import Heading, Image, Items, Link, Page, Table

PAGE = Page(
    "lnbench x",
    [
        Heading("lnbench x: a<b", 1),
        Items(["`seed` is averaged over", "**winner at the edge** of 1 < 2"]),
        Table(
            ["claim", "verdict|why"],
            [["a: LN beats BN", "held"], ["b", Link("report", "b dir/report/report.html")]],
            ["held", ""],
        ),
        Heading("Failures"),
        Items(["`3`: **failed**: boom"]),
        Image("curves_step.png", b"\x89PNG\r\n\x1a\n"),
    ],
)


def test_markdown_is_the_blocks_in_order_separated_by_blank_lines():
    assert render.markdown(PAGE) == (
        "# lnbench x: a<b\n\n"
        "- `seed` is averaged over\n- **winner at the edge** of 1 < 2\n\n"
        "| claim | verdict\\|why |\n| --- | --- |\n| a: LN beats BN | held |\n"
        "| b | [report](b dir/report/report.html) |\n\n"
        "## Failures\n\n- `3`: **failed**: boom\n\n"
        "![curves_step.png](curves_step.png)\n"
    )


def test_html_keeps_the_markup_escapes_the_text_colours_verdicts_and_embeds_images():
    page = render.html_page(PAGE)
    assert page.startswith("<!doctype html><meta charset='utf-8'><title>lnbench x</title><style>")
    assert "<h1>lnbench x: a&lt;b</h1>" in page
    assert "<li><code>seed</code> is averaged over</li><li><b>winner at the edge</b> of 1 &lt; 2</li>" in page
    assert (
        "<tr class='held'><td>a: LN beats BN</td><td>held</td></tr>"
        "<tr><td>b</td><td><a href='b dir/report/report.html'>report</a></td></tr>" in page
    )
    assert "<th>verdict|why</th>" in page and "tr.held{background:" in page
    assert "<img alt='curves_step.png' src='data:image/png;base64,iVBORw0KGgo='>" in page


def test_the_terminal_gets_tables_as_markdown_lists_without_marks_and_no_images():
    assert render.terminal(PAGE.blocks[1:]) == (
        "  - seed is averaged over\n  - winner at the edge of 1 < 2\n\n"
        "| claim | verdict\\|why |\n| --- | --- |\n| a: LN beats BN | held |\n"
        "| b | [report](b dir/report/report.html) |\n\n"
        "Failures:\n  - 3: failed: boom\n"
    )
