"""The package's shape: imports point down the layers (lnbench's Hydra plugins above them all), no two modules
import each other by any path, no module reaches into another's private names, a third-party package's private
modules or attributes are used only where pinned with why and the version read, the run directory's file names
are typed in lnbench/runs/ only, and no module outgrows a reader.

A private name (`_x`) crossing a module boundary means a split made for length, not along a seam: the two
modules are one. The scans read lnbench/ and hydra_plugins/ with the ast module (nothing is imported), so they
see every import in any scope (a function's too), every `from lnbench.a import _b` and every `<name>._b`.
Each scan is also fed a planted example, so that a scan that found nothing because it looked at nothing fails.
"""

from __future__ import annotations

import ast
import functools
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
# Beside the package, above every layer: what calibrates lnbench's verdicts (simulations, synthetic sweeps). It
# imports lnbench; no module of lnbench imports it (the wheel does not ship it).
ABOVE = "calibration"
# lnbench's Hydra plugins (hydra_plugins/lnbench_*): above every layer. Hydra imports them in every process of every
# Hydra app; they may import lnbench, and nothing in lnbench imports them.
PLUGINS = "hydra_plugins"
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
    "config/overrides.py": "Hydra's argument parser: lnbench reads `lnbench train` as Hydra will (hydra-core 1.3.8)",
    "launch/slurm/launcher.py": "submitit's requeue, which it exposes no public way to do ourselves (submitit 1.5.4)",
    # torch's fused LSTM/GRU ops as torch.nn.LSTM calls them. The same functions are public as torch.lstm and
    # torch.gru: to switch to once lnbench/nn/fast/ is free to edit (its kernel work was under way in issue 38).
    "nn/fast/layers.py": "torch._VF.lstm / gru (torch 2.13.0)",
}


# Every private attribute (`x._y`) of a third-party object that lnbench or its plugins use: the package and version
# it was read from, and why. A Hydra, OmegaConf or submitit upgrade: read each again.
PRIVATE_ATTRIBUTES = {
    "_get_node": "omegaconf 2.3.1 Container._get_node: a node as stored (its interpolation unresolved, its type), "
    "which cfg[key] would resolve; config/validate.py walks the composed config's nodes with it",
    "_is_none": "omegaconf 2.3.1 Node._is_none: a node set to null without resolving it (config/validate.py)",
    "_is_missing": "omegaconf 2.3.1 Node._is_missing: a node left ??? without raising (config/validate.py)",
    "_is_optional": "omegaconf 2.3.1 Node._is_optional: whether a flag's schema takes null, so its refusal names it "
    "(config/validate.py; OmegaConf.is_optional is gone since 2.1)",
    "_resolvers": "omegaconf 2.3.1 BaseContainer._resolvers: this process's resolvers, sent to the pool's forked "
    "workers as joblib's loky sends Hydra's singleton state (launch/process/pool.py)",
    "_usr_sig": "submitit 1.5.4 JobEnvironment._usr_sig: the signal of submitit's notice before the time limit "
    "(launch/slurm/launcher.py)",
    "_timeout_countdown": "submitit 1.5.4 DelayedSubmission._timeout_countdown: the time-outs a job has left, "
    "for a requeue of our own (launch/slurm/launcher.py)",
    "_requeue": "submitit 1.5.4 JobEnvironment._requeue: scontrol requeue as submitit does it (launch/slurm)",
    "_registered": "submitit 1.5.4 SlurmInfoWatcher's jobs, which launch/slurm/queue.py's QueueWatcher asks squeue "
    "about where sacct is off",
    "_finished": "submitit 1.5.4 SlurmInfoWatcher's finished jobs (as _registered)",
    "_save_config": "hydra-core 1.3.8 hydra.core.utils._save_config, which run_job calls to write a job's .hydra/ "
    "records before the task function: replaced by an atomic writer that leaves a full disk to the job "
    "(launch/hydra_records.py; Hydra has no hook before those writes)",
    "_num_calls": "submitit 1.5.4 SlurmInfoWatcher's count of its sacct calls, kept by QueueWatcher.update",
    "_info_dict": "submitit 1.5.4 SlurmInfoWatcher's job states (as _registered)",
    "_make_command": "submitit 1.5.4 SlurmInfoWatcher._make_command: its sacct command, kept where sacct works",
    "_get_header_dict": "hydra-core 1.3.8 ConfigSource._get_header_dict: a config file's `# @package` line, the "
    "helper Hydra's own FileConfigSource uses (hydra_plugins/lnbench_user_config)",
    "_normalize_file_name": "hydra-core 1.3.8 ConfigSource's helper for its subclasses: NAME -> NAME.yaml (as above)",
    "_list_add_result": "hydra-core 1.3.8 ConfigSource's helper for its subclasses: a group's listing (as above)",
    "_exit": "os._exit, documented in the os module: a worker or guardian that must not run its parent's handlers",
}
# Hydra's and joblib's behaviour lnbench copies rather than calls (no attribute to scan): the text that marks each
# copy in lnbench's code, with the version it was read from and why. Each marker must still be found.
MIRRORED = {
    "hydra.job.id": "hydra-joblib-launcher 1.2.0 _core.execute_job: a job's id `train_3` (the basic launcher's `3`), "
    "set by the pool's worker as joblib's would (launch/process/pool.py)",
    "MAX_NUM_THREADS_VARS": "joblib 1.6.0 _parallel_backends: the thread variables loky sets in its workers, the "
    "same in the pool's (launch/process/pool.py)",
    "_prepare_worker_env": "joblib 1.6.0: the thread count loky gives each worker (pool.joblib_env)",
    "omegaconf_resolvers": "hydra-core 1.3.8 Singleton state: the key under which the resolvers travel to a worker",
    "hydra.mode=MULTIRUN": "hydra-core 1.3.8 _run_app: the override it adds to a multirun, added by check/inprocess.py",
    "validate_batch_is_legal": "hydra-core 1.3.8 BasicSweeper: composes every job to validate a batch; check's "
    "in-process sweeps leave that to the workers, which compose each job anyway (check/inprocess.py)",
    "in reverse at an end": "hydra-core 1.3.8 Callbacks: in order at a start, reversed at an end, a callback's "
    "exception a warning; check/inprocess.py's SweepCallbacks",
    "FileConfigSource": "hydra-core 1.3.8 hydra._internal.core_plugins.file_config_source: the file source "
    "hydra_plugins/lnbench_user_config's UserFolderSource copies (no private class subclassed)",
}


@functools.cache
def parsed(source: str) -> ast.Module:
    """A module's syntax tree, parsed once for all the scans (read-only: no scan changes it)."""
    return ast.parse(source)


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_crossings(source: str) -> list[str]:
    """Each use of a private name that another lnbench module defines: `line: what`."""
    tree = parsed(source)
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


def our_plugin(module: str) -> str | None:
    """The plugin of ours a dotted module is in (`hydra_plugins.lnbench_packed.launcher` -> lnbench_packed)."""
    parts = module.split(".")
    return parts[1] if parts[0] == PLUGINS and len(parts) > 1 and parts[1].startswith("lnbench_") else None


def climbing_imports(path: str, source: str) -> list[str]:
    """Each import in module `path` of a layer above its own or a peer of its rank: `line: layer -> module`.
    `path` is relative to lnbench/ (training/recipe.py), or hydra_plugins/NAME/... for a plugin of ours, which
    may import lnbench and no other plugin of ours; no lnbench module imports a plugin of ours."""
    parts = Path(path).parts
    me = parts[1] if parts[0] == PLUGINS else parts[0].removesuffix(".py")
    found = []
    for line, module, names in imports(parsed(source)):
        # `from lnbench import phases`: a module the package holds (names it defines have no layer)
        for dotted in [f"{module}.{n}" for n in names] if module in ("lnbench", PLUGINS) else [module]:
            plugin, there = our_plugin(dotted), layer_of(dotted)
            if dotted.split(".")[0] == ABOVE:  # calibration/ sits above lnbench and its plugins
                found.append(f"{line}: {me} -> {dotted}")
            if parts[0] == PLUGINS:
                climbs = plugin is not None and plugin != me
            else:
                climbs = plugin is not None or (
                    there is not None and there != me and (me, there) not in ALLOWED_CLIMBS and RANK[there] >= RANK[me]
                )
            if climbs:
                found.append(f"{line}: {me} -> {dotted}")
    return found


def relative(p: Path) -> str:
    """A module's path as climbing_imports takes it."""
    return str(p.relative_to(PACKAGE if p.is_relative_to(PACKAGE) else ROOT))


# ---- cycles --------------------------------------------------------------------------------------
def module_of(path: str) -> str:
    """`lnbench/config/user_folder.py` -> lnbench.config.user_folder; a package's __init__.py -> the package."""
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules among `sources` (path -> text, paths from the repository's root) it imports, in any
    scope: `from a import b` is a.b where that is a module, else a; relative imports resolved."""
    names = {module_of(p) for p in sources}
    graph: dict[str, set[str]] = {m: set() for m in names}
    for path, source in sources.items():
        me = module_of(path)
        package = me if path.endswith("__init__.py") else me.rpartition(".")[0]
        for node in ast.walk(parsed(source)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
            else:
                continue
            graph[me] |= {t for t in targets if t in names and t != me}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


# ---- third-party private attributes ------------------------------------------------------------------
def assigned(node: ast.AST) -> list[ast.expr]:
    """The targets an assignment binds, tuples unpacked."""
    targets = (
        list(node.targets) if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    )
    flat = []
    while targets:
        t = targets.pop()
        targets += t.elts if isinstance(t, (ast.Tuple, ast.List)) else []
        flat += [] if isinstance(t, (ast.Tuple, ast.List)) else [t]
    return flat


def defined_names(source: str) -> set[str]:
    """The names a module of ours defines: functions, classes, arguments, variables, fields, `self._x`."""
    names = set()
    for node in ast.walk(parsed(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        for t in assigned(node):
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"):
                names.add(t.attr)
    return names


def third_party_privates(source: str, ours_define: set[str]) -> list[str]:
    """Each private attribute used on an object that is not ours: `line: expression`. On self, cls or super() in a
    class with a third-party base, any attribute the class does not define itself is its base's; on anything
    else, an attribute no module of ours defines (`ours_define`)."""
    tree = parsed(source)
    own: dict[int, tuple[set[str], bool]] = {}  # id(node in a class) -> what the class defines, a base not ours
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        names |= {t.id for n in cls.body for t in assigned(n) if isinstance(t, ast.Name)}
        names |= {
            t.attr
            for n in ast.walk(cls)
            for t in assigned(n)
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in ("self", "cls")
        }
        bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in cls.bases]
        theirs = any(b not in ours_define for b in bases)
        for n in ast.walk(cls):
            own[id(n)] = (names, theirs)
    found = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Attribute) and private(n.attr)):
            continue
        base, (names, derived) = n.value, own.get(id(n), (set(), False))
        is_super = isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"
        if is_super or isinstance(base, ast.Name) and base.id in ("self", "cls"):
            theirs = derived if is_super else n.attr not in names and (derived or n.attr not in ours_define)
        else:
            theirs = n.attr not in ours_define
        if theirs:
            found.append((n.lineno, f"{n.lineno}: {ast.unparse(n)}"))
    return [hit for _, hit in sorted(found)]


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
    tree = parsed(source)
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
    for line, module, names in imports(parsed(source)):
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
        "    from calibration.nulls import SHAPES\n"  # beside the package: never imported by it
    )
    assert climbing_imports("training/recipe.py", source) == [
        "6: training -> lnbench.launch.process.threads",
        "7: training -> lnbench.report.make",
        "8: training -> lnbench.claims",
        "9: training -> calibration.nulls",
    ]
    assert climbing_imports("phases.py", "from lnbench.nn import norm\n") == ["1: phases -> lnbench.nn"]
    assert climbing_imports("nn/norm.py", "from lnbench import errors, phases, runs\n") == ["1: nn -> lnbench.runs"]
    assert climbing_imports("cli.py", "from lnbench.launch.entry import main\n") == []


def test_every_folder_and_top_level_module_has_a_layer():
    names = {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert names - {"__init__"} == set(RANK), "give each new folder or module its place in LAYERS"


def test_the_scan_finds_an_import_of_a_plugin_of_ours_and_between_plugins():
    source = "def f():\n    from hydra_plugins.lnbench_user_config import UserFolderSource\n"
    assert climbing_imports("config/presets.py", source) == ["2: config -> hydra_plugins.lnbench_user_config"]
    assert climbing_imports("cli.py", "from hydra_plugins import lnbench_packed\n") == [
        "1: cli -> hydra_plugins.lnbench_packed"
    ]
    plugin = "hydra_plugins/lnbench_packed/launcher.py"
    assert climbing_imports(plugin, "from lnbench.launch.sweep import pack\nimport hydra_plugins.hydra_x\n") == []
    assert climbing_imports(plugin, "import hydra_plugins.lnbench_user_config\n") == [
        "1: lnbench_packed -> hydra_plugins.lnbench_user_config"
    ]
    assert climbing_imports("launch/slurm/launcher.py", "from hydra_plugins.hydra_submitit_launcher import x\n") == []


def test_no_import_climbs_a_layer():
    found = [f"{p.relative_to(ROOT)}:{hit}" for p in ours() for hit in climbing_imports(relative(p), p.read_text())]
    assert len(ours()) > len(modules())  # the plugins are scanned
    assert not found, (
        "imports that climb a layer (move the concept down to where both can reach it, or pass the value "
        "down as an argument):\n" + "\n".join(found)
    )


# ---- cycles, imports in any scope ----------------------------------------------------------------------
def test_the_scan_finds_a_cycle_through_a_function_level_import_and_nothing_else():
    sources = {
        "lnbench/a.py": "from lnbench import b\n",
        "lnbench/b.py": "def f():\n    import lnbench.c\n",  # the cycle closes inside a function
        "lnbench/c.py": "from lnbench.a import x\n",
        "lnbench/d.py": "import lnbench.a\nfrom . import e\n",  # into the cycle, not part of it
        "lnbench/e.py": "",
        "hydra_plugins/lnbench_p/__init__.py": "from lnbench.e import y\n",
        "lnbench/config/__init__.py": "",
        "lnbench/config/f.py": "def g():\n    from hydra_plugins.lnbench_p import z\n",
        "lnbench/config/g.py": "from .f import w\n",  # relative: lnbench.config.f
    }
    graph = import_graph(sources)
    assert graph["lnbench.d"] == {"lnbench.a", "lnbench.e"} and graph["lnbench.config.g"] == {"lnbench.config.f"}
    assert cycles(graph) == [["lnbench.a", "lnbench.b", "lnbench.c"]]
    sources["lnbench/e.py"] = "def h():\n    from lnbench.config import f\n"  # through the plugin and back
    assert cycles(import_graph(sources)) == [
        ["hydra_plugins.lnbench_p", "lnbench.config.f", "lnbench.e"],
        ["lnbench.a", "lnbench.b", "lnbench.c"],
    ]


def test_no_two_modules_import_each_other_by_any_path():
    graph = import_graph({str(p.relative_to(ROOT)): p.read_text() for p in ours()})
    assert sum(map(len, graph.values())) > 300  # the scan saw the imports
    found = cycles(graph)
    assert not found, (
        "modules that import each other, in some scope (move what both need down into a module of its own):\n"
        + "\n".join(" <-> ".join(c) for c in found)
    )


# ---- third-party private attributes and behaviour ------------------------------------------------------------
def test_the_scan_finds_a_third_party_private_attribute_and_not_ours():
    source = (
        "class Mine(TheirBase):\n"
        "    _kept = 1\n"
        "    def __init__(self):\n"
        "        self._own, self._pair = 1, 2\n"
        "    def _helper(self):\n"
        "        return self._own + self._pair + self._kept + self._theirs + super()._make()\n"
        "node._get_node('k')\n"
        "plan._ours()\n"
        "OmegaConf.__name__\n"
    )
    assert third_party_privates(source, defined_names(source) | {"_ours"}) == [
        "6: self._theirs",
        "6: super()._make",
        "7: node._get_node",
    ]


def test_every_third_party_private_attribute_is_pinned_and_every_pin_used():
    ours_define = set().union(*(defined_names(p.read_text()) for p in ours()))
    found = {
        f"{p.relative_to(ROOT)}:{hit}": hit.rpartition("._")[2]
        for p in ours()
        for hit in third_party_privates(p.read_text(), ours_define)
    }
    unpinned = [where for where, attr in found.items() if f"_{attr}" not in PRIVATE_ATTRIBUTES]
    assert not unpinned, (
        "private attributes of other packages (their next release may change them): pin each in "
        "PRIVATE_ATTRIBUTES with why and the version read, or use a public way:\n" + "\n".join(unpinned)
    )
    unused = set(PRIVATE_ATTRIBUTES) - {f"_{a}" for a in found.values()}
    assert not unused, f"pinned private attributes no module uses any more (drop them): {sorted(unused)}"


def test_every_mirrored_behaviour_is_still_where_its_marker_says():
    text = "\n".join(p.read_text() for p in ours())
    gone = [marker for marker in MIRRORED if marker not in text]
    assert not gone, f"mirrors of Hydra's or joblib's behaviour no longer found (drop or re-mark them): {gone}"


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
