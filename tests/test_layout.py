"""The package's shape: imports point down the layers, no module reaches into another's private names or a
third-party package's private modules, the run directory's file names are typed in lnbench/runs/ only, and no
module outgrows a reader.

A private name (`_x`) crossing a module boundary means a split made for length, not along a seam: the two
modules are one. The scans read lnbench/ with the ast module (nothing is imported), so they see every import in
any scope (a function's too), every `from lnbench.a import _b` and every `<name imported from lnbench>._b`.
Each scan is also fed a planted example, so that a scan that found nothing because it looked at nothing fails.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lnbench"
ROOT = PACKAGE.parent
MAX_LINES = 400

# The layers, bottom first: a module may import its own layer and those below it, never one above nor a peer of
# its own rank (nn and data, models and runs, training and claims are independent of each other).
LAYERS = [
    {"errors", "atomic"},  # the top-level modules every layer shares
    {"environment"},  # the LNBENCH_* variables, checked (errors, atomic) and read by the layers above
    {"phases"},  # timed phases, to $LNBENCH_PHASES
    {"nn", "data"},
    {"config"},
    {"models", "runs"},
    {"training", "claims"},
    {"report"},
    {"launch"},
    {"check"},
    {"bench"},
    {"cli"},
    {"options", "train"},  # the old flat names, shims over the package (deprecated)
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
# Imports allowed to climb, each with why. Empty: keep it so.
ALLOWED_CLIMBS: dict[tuple[str, str], str] = {}

# The run directory's files: named in lnbench/runs/files.py only; every other module uses its constants.
RUN_FILES = (
    "summary.json",
    "metrics.jsonl",
    "config.yaml",
    "hydra.yaml",
    "overrides.yaml",
    "multirun.yaml",
    "checkpoint.pt",
    "crash.log",
    "train.log",
    ".hydra",
    ".lock",
    ".stopped",
)
# Files allowed to type them, each with why. Empty: keep it so.
RUN_FILES_PENDING: dict[str, str] = {}
RUN_FILE = re.compile(r"(?:^|[/*])(" + "|".join(re.escape(f) for f in RUN_FILES) + r")(?:$|/)")
# The modules that may import a third-party package's private module or name, each with why (its version pinned
# in pyproject.toml). Hydra's: one place only.
PRIVATE_API_PINNED = {
    "config/overrides.py": "Hydra's argument parser: lnbench reads `lnbench train` as Hydra will; and its "
    "composition step, wrapped so that your own defaults apply where the config has each key (hydra-core 1.3)",
    "launch/slurm/launcher.py": "submitit's requeue, which it exposes no public way to do ourselves (submitit 1.5.x)",
    # torch's fused LSTM/GRU ops as torch.nn.LSTM calls them. The same functions are public as torch.lstm and
    # torch.gru: to switch to once lnbench/nn/fast/ is free to edit (its kernel work was under way in issue 38).
    "nn/fast/layers.py": "torch._VF.lstm / gru",
}


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


def layer_of(module: str) -> str | None:
    """The layer of a dotted lnbench module (`lnbench.training.recipe` -> training); None for the package itself
    or a name it defines (`from lnbench import CONF_DIR`)."""
    parts = module.split(".")
    if parts[0] != "lnbench" or len(parts) < 2 or parts[1] not in RANK:
        return None
    return parts[1]


def imports(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """(line, dotted module, names taken from it) of every absolute import in any scope."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
    return found


def climbing_imports(path: str, source: str) -> list[str]:
    """Each import in module `path` (relative to lnbench/, e.g. training/recipe.py) of a layer above its own or
    a peer of its rank: `line: layer -> module`."""
    me = Path(path).parts[0].removesuffix(".py")
    found = []
    for line, module, names in imports(ast.parse(source)):
        # `from lnbench import phases`: a module the package holds (names it defines have no layer)
        for dotted in [f"{module}.{n}" for n in names] if module == "lnbench" else [module]:
            there = layer_of(dotted)
            if there is not None and there != me and (me, there) not in ALLOWED_CLIMBS and RANK[there] >= RANK[me]:
                found.append(f"{line}: {me} -> {dotted}")
    return found


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (prose, not names)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def run_file_literals(source: str) -> list[str]:
    """Each string (or f-string part) that names a run directory's file as a path, not in prose: `line: text`.
    A path has no spaces: "summary.json", ".hydra/overrides.yaml", "**/checkpoint.pt", f"{d}/train.log"."""
    tree = ast.parse(source)
    prose = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value
            if not any(c.isspace() for c in text) and RUN_FILE.search(text):
                found.append(f"{node.lineno}: {text!r}")
    return found


def private_module_imports(source: str) -> list[str]:
    """Each import of another package's private module or name (`hydra._internal.x`, `from x import _y`)."""
    found = []
    for line, module, names in imports(ast.parse(source)):
        if module.split(".")[0] in ("lnbench", "hydra_plugins") and not module.startswith("hydra_plugins.hydra_"):
            continue  # ours (lnbench's privates: test_no_module_imports_a_private_name_from_another)
        if any(private(part) for part in module.split(".")):
            found.append(f"{line}: {module}")
        found += [f"{line}: {module}.{n}" for n in names if private(n) and not private(module.split(".")[-1])]
    return found


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def ours() -> list[Path]:
    """lnbench's modules and its Hydra plugins'."""
    return modules() + sorted((ROOT / "hydra_plugins").rglob("*.py"))


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


# ---- direction ---------------------------------------------------------------------------------
def test_the_scan_finds_an_upward_import_in_any_scope_and_nothing_else():
    source = (
        "import torch\n"
        "from lnbench import CONF_DIR, phases\n"  # the package's own name, and the bottom layer
        "from lnbench.config.runtime import Runtime\n"  # below: fine
        "from lnbench.training import checkpoint\n"  # its own layer: fine
        "def f():\n"
        "    from lnbench.launch.process.threads import usable_cores\n"  # a climb, in a function
        "    import lnbench.report.make\n"  # another
        "    from lnbench.claims import stats\n"  # a peer
    )
    assert climbing_imports("training/recipe.py", source) == [
        "6: training -> lnbench.launch.process.threads",
        "7: training -> lnbench.report.make",
        "8: training -> lnbench.claims",
    ]
    assert climbing_imports("phases.py", "from lnbench.nn import norm\n") == ["1: phases -> lnbench.nn"]
    assert climbing_imports("nn/norm.py", "from lnbench import errors, phases, runs\n") == ["1: nn -> lnbench.runs"]
    assert climbing_imports("cli.py", "from lnbench.launch.entry import main\n") == []


def test_every_folder_and_top_level_module_has_a_layer():
    names = {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert names - {"__init__"} == set(RANK), "give each new folder or module its place in LAYERS"


def test_no_import_climbs_a_layer():
    found = [f"lnbench/{p.relative_to(PACKAGE)}:{hit}" for p in modules() for hit in climbing_imports(
        str(p.relative_to(PACKAGE)), p.read_text())]  # fmt: skip
    assert not found, (
        "imports that climb a layer (move the concept down to where both can reach it, or pass the value "
        "down as an argument):\n" + "\n".join(found)
    )


# ---- the run directory's file names --------------------------------------------------------------
def test_the_scan_finds_a_typed_run_file_name_and_not_prose():
    source = (
        '"""Reads summary.json."""\n'
        'a = run_dir / "summary.json"\n'
        'b = sweep.glob("**/.hydra/overrides.yaml")\n'
        'c = f"{run_dir}/train.log"\n'
        'd = "see its summary.json"\n'  # prose in a message
        'e = "summary_json"\n'
        'f = "metrics.jsonl.tmp"\n'
    )
    assert run_file_literals(source) == [
        "2: 'summary.json'",
        "3: '**/.hydra/overrides.yaml'",
        "4: '/train.log'",
    ]


def test_no_run_file_name_is_typed_outside_runs():
    runs, pending = PACKAGE / "runs", {PACKAGE / path for path in RUN_FILES_PENDING}
    found = [
        f"{p.relative_to(ROOT)}:{hit}"
        for p in ours()
        if not p.is_relative_to(runs) and p not in pending
        for hit in run_file_literals(p.read_text())
    ]
    assert not found, "run-directory file names typed outside lnbench/runs/ (use its constants):\n" + "\n".join(found)
    assert all(run_file_literals(p.read_text()) for p in pending)  # a pending file that no longer types one: drop it


# ---- third-party private modules ---------------------------------------------------------------
def test_the_scan_finds_a_private_module_of_another_package():
    source = (
        "import torch\n"
        "from hydra._internal.utils import get_args_parser\n"
        "def f():\n"
        "    from hydra_plugins.hydra_joblib_launcher import _core\n"
        "    import torch._dynamo\n"
        "from lnbench.runs import Run\n"
        "from __future__ import annotations\n"
    )
    assert private_module_imports(source) == [
        "2: hydra._internal.utils",
        "4: hydra_plugins.hydra_joblib_launcher._core",
        "5: torch._dynamo",
    ]


def test_a_private_module_of_another_package_is_imported_only_where_pinned():
    pinned = {PACKAGE / path for path in PRIVATE_API_PINNED}
    found = [
        f"{p.relative_to(ROOT)}:{hit}"
        for p in ours()
        if p not in pinned
        for hit in private_module_imports(p.read_text())
    ]
    assert not found, (
        "private modules or names of other packages (their next release may change them; the pinned places are "
        "PRIVATE_API_PINNED):\n" + "\n".join(found)
    )
    assert all(private_module_imports(p.read_text()) for p in pinned)  # each pinned place still needs its pin
    hydras = [
        p
        for p in ours()
        if any(".hydra." in f".{hit.split(': ')[1]}." for hit in private_module_imports(p.read_text()))
    ]
    assert hydras == [PACKAGE / "config/overrides.py"]  # Hydra's internals: one place


# ---- the config layer, the run's Runtime record included, loads without torch -----------------
def test_the_config_layer_loads_without_torch():
    config = sorted(f"lnbench.config.{p.stem}" for p in (PACKAGE / "config").glob("*.py") if p.stem != "__init__")
    assert "lnbench.config.runtime" in config
    code = f"import sys\nfor m in {config!r}: __import__(m)\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False", "a module of lnbench/config imports torch: config is what a run can be"
