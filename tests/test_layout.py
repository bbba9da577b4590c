"""The package's shape: no module reaches into another's private names, and none outgrows a reader.

A private name (`_x`) crossing a module boundary means a split made for length, not along a seam: the two
modules are one. The scan reads lnbench/ with the ast module (nothing is imported), so it sees every
`from lnbench.a import _b` and every `<name imported from lnbench>._b`.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lnbench"
MAX_LINES = 400


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_crossings(source: str) -> list[str]:
    """Each use of a private name that another lnbench module defines: `line: what`."""
    tree = ast.parse(source)
    imported: set[str] = set()  # local names bound to lnbench modules or to names taken from them
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "lnbench":
            for alias in node.names:
                if private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                imported.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "lnbench":
                    imported.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in imported:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_scan_finds_each_kind_of_crossing_and_nothing_else():
    source = (
        "import lnbench.data.base as base\n"
        "from lnbench.nn import norm\n"
        "from lnbench.nn.norm import NormKind, _hidden\n"
        "from lnbench.runs import Run as R\n"
        "def _own(): return 1\n"
        "x = base._mix(1) + norm.apply_norm + NormKind._value2member_map_ + R.__name__ + _own() + self._y\n"
    )
    assert sorted(private_crossings(source)) == [
        "3: from lnbench.nn.norm import _hidden",
        "6: NormKind._value2member_map_",
        "6: base._mix",
    ]


def test_no_module_imports_a_private_name_from_another():
    found = [f"{p.relative_to(PACKAGE.parent)}:{hit}" for p in modules() for hit in private_crossings(p.read_text())]
    assert not found, (
        "private names used across modules (make them public where they are an interface, or "
        "move them beside their one user):\n" + "\n".join(found)
    )


def test_no_module_outgrows_400_lines():
    sizes = {p: len(p.read_text().splitlines()) for p in modules()}
    assert len(sizes) > 50  # the scan found the package
    long = [f"{p.relative_to(PACKAGE.parent)}: {n} lines" for p, n in sizes.items() if n > MAX_LINES]
    assert not long, "modules over 400 lines (split them along a seam):\n" + "\n".join(long)
