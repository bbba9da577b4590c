"""lnbench's own C++ kernels (`lnbench/nn/fast/csrc/*.cpp`, and the headers they share), built once per
machine as a torch extension.

`ops()` gives `torch.ops.lnbench` with the kernels registered, or None where they cannot be built (no C++
compiler, no ninja, a failed build): the callers then run torch's own ops instead, and `status()` says
which, for the log and the run's provenance. `LNBENCH_NATIVE=0` turns the kernels off.

One build per ISA, chosen by torch's own CPU capability (`torch.backends.cpu.get_cpu_capability()`, which
`ATEN_CPU_CAPABILITY=default|avx2|avx512` lowers): x86-64-v4 for AVX512, x86-64-v3 for AVX2, the
compiler's baseline otherwise (SSE2 on x86-64, NEON on arm64). Never -march=native: a cached build must
run on any machine that reports the same capability. The sources say how their results stay the same on
any thread count.

The compiler is `$CXX`, else the C++ sibling of `$CC` (gcc -> g++, clang -> clang++), else `c++`. The
build (about 20 s) goes to `$LNBENCH_CACHE` (else ~/.cache/lnbench), named by a hash of the sources and
the headers they include (csrc/*.cpp, csrc/*.h), the flags and the torch version, so that any edit builds
anew and a stale build is never loaded; `make setup` runs it ahead (`python -m lnbench.nn.fast.native`),
and torch's file lock keeps concurrent first runs from building twice. Each load touches its build's folder; builds
of other sources for the same ISA are removed once unused for STALE_DAYS (never sooner: another checkout may be
using one).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import torch

from lnbench import environment

log = logging.getLogger("lnbench")

CSRC = Path(__file__).parent / "csrc"
SOURCES = sorted(CSRC.glob("*.cpp"))  # what the compiler is given
HEADERS = sorted(CSRC.glob("*.h"))  # what they include (kernel_common.h): in the build's hash too
# -ffp-contract=off: no multiply-add fused in one place and not in another (the products' tiles fuse theirs
# on purpose, see the source). -fno-trapping-math (as torch builds itself): without it gcc keeps the
# branches of the AVX2 and baseline builds' selects (exp's clamp, tanh's two ranges) and leaves those
# loops scalar. -fopenmp: the kernels run their own OpenMP team, and ATen's at::parallel_for is an
# OpenMP pragma in its headers; the libgomp it links is the one torch loaded (the same soname), so torch
# and the kernels share one thread pool.
COMMON_FLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-fopenmp"]
# x86: the ISA level torch dispatches to, and the width of the vectors the products' tiles hold
X86_FLAGS = {
    "AVX512": ["-march=x86-64-v4", "-DLNB_VECTOR_BYTES=64"],
    "AVX2": ["-march=x86-64-v3", "-DLNB_VECTOR_BYTES=32"],
}
STALE_DAYS = 30
CXX_OF_CC = {"gcc": "g++", "clang": "clang++", "cc": "c++"}


def isa() -> str:
    """The capability torch's own kernels dispatch to, which picks our build."""
    return torch.backends.cpu.get_cpu_capability()


def build_flags() -> list[str]:
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return COMMON_FLAGS + (X86_FLAGS.get(isa(), []) if x86 else [])


def compiler() -> Optional[str]:
    """The C++ compiler a build would run, or None where there is none."""
    cxx = os.environ.get("CXX")
    if not cxx and os.environ.get("CC"):
        cc = os.environ["CC"]
        cxx = CXX_OF_CC.get(Path(cc).name, cc)
    cxx = cxx or "c++"
    program = cxx.split()[0]
    if Path(program).name in ("false", "true") or shutil.which(program) is None:  # CC=false: "no compiler"
        return None
    return cxx


def cache_dir() -> Path:
    return environment.path("LNBENCH_CACHE") or Path.home() / ".cache" / "lnbench"


def build_name() -> str:
    h = hashlib.sha256()
    for src in SOURCES + HEADERS:  # a header edit is a new name: a stale .so is never loaded
        h.update(src.name.encode())
        h.update(src.read_bytes())
    h.update(" ".join(build_flags()).encode())
    h.update(torch.__version__.encode())
    return f"{_prefix()}{h.hexdigest()[:12]}"


def _prefix() -> str:
    return f"lnbench_native_{isa().lower().replace(' ', '_')}_"


_status: dict[str, str] = {}


def ops() -> Optional[Any]:
    """torch.ops.lnbench with the kernels loaded, or None (see status())."""
    return _load()


def status() -> str:
    """What runs the LN/BN LSTM and GRU (and the un-normalized GRU): "native (AVX512 build)", or "torch ops
    (why)" (the un-normalized GRU then runs torch's GRU)."""
    _load()
    return _status["text"]


@lru_cache(maxsize=None)
def _load() -> Optional[Any]:
    if environment.value("LNBENCH_NATIVE", "1") == "0":
        _status["text"] = "torch ops (LNBENCH_NATIVE=0)"
        return None
    name = build_name()
    where = cache_dir() / name
    built = where / f"{name}.so"
    try:
        if not built.exists():
            _build(name, where)
        torch.ops.load_library(str(built))
        os.utime(where)  # in use: not stale for another checkout's clean-up
    except Exception as e:  # noqa: BLE001 - no compiler, no ninja, a failed build: torch's ops run instead
        why = _reason(e)
        _status["text"] = f"torch ops (the C++ kernels did not build: {why})"
        log.warning(
            "lnbench's C++ kernels could not be built, so the LN/BN LSTM and GRU run on torch's ops and the "
            "un-normalized GRU on torch's GRU (slower, and their numbers differ in the last bits from the "
            "kernels'): %s",
            why,
        )
        return None
    _status["text"] = f"native ({isa()} build)"
    return torch.ops.lnbench


def _build(name: str, where: Path) -> None:
    cxx = compiler()
    if cxx is None:
        chosen = next((f"{k}={os.environ[k]}" for k in ("CXX", "CC") if os.environ.get(k)), "no c++ on PATH")
        raise RuntimeError(f"no C++ compiler ({chosen})")
    from torch.utils import cpp_extension  # noqa: PLC0415 (it loads setuptools: only when a build is due)

    where.mkdir(parents=True, exist_ok=True)
    # On stderr, not the log: the first build often comes before any log handler is set up (preflight's model
    # build), and a minute of silence after `pip install` reads as a hang.
    print(
        f"lnbench: building its C++ kernels for {isa()} in {where} (once per machine, about a minute; "
        "`python -m lnbench.nn.fast.native` builds them ahead) ...",
        file=sys.stderr,
        flush=True,
    )
    started = time.time()
    env_cxx = os.environ.get("CXX")
    os.environ["CXX"] = cxx
    try:
        cpp_extension.load(
            name=name,
            sources=[str(s) for s in SOURCES],
            extra_cflags=build_flags(),
            extra_ldflags=["-fopenmp"],
            build_directory=str(where),
            is_python_module=False,
            verbose=False,
        )
    finally:
        if env_cxx is None:
            del os.environ["CXX"]
        else:
            os.environ["CXX"] = env_cxx
    print(f"lnbench: C++ kernels built in {time.time() - started:.0f} s.", file=sys.stderr, flush=True)
    # Builds of other sources for this ISA, once unused for STALE_DAYS: not sooner, since another checkout or
    # version of lnbench on this machine (a helper's worktree, an older venv) may be loading one right now.
    for old in where.parent.glob(_prefix() + "*"):
        if old != where and time.time() - old.stat().st_mtime > STALE_DAYS * 86400:
            shutil.rmtree(old, ignore_errors=True)


def _reason(e: Exception) -> str:
    """The line of a build failure that says what went wrong (the compiler's first error, if any)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and "ninja: build stopped" not in ln]
    return (errors[0] if errors else lines[-1] if lines else type(e).__name__)[:300]


if __name__ == "__main__":  # `python -m lnbench.nn.fast.native`: build now (make setup), say what runs
    logging.basicConfig(format="%(levelname)s %(message)s")
    print(f"lnbench's LSTM/GRU kernels: {status()}")
