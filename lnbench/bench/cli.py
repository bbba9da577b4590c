"""`lnbench bench`: time per training step (forward + backward) of each model against torch's fused kernels.

The table's title names the CPU model, the instruction set torch's kernels dispatch to and the build of
lnbench's own kernels (AVX2, AVX512, ...; `ATEN_CPU_CAPABILITY=default|avx2|avx512` lowers both, to
compare builds on one machine).

Recurrent rows: for each recurrent model preset of conf/model (by default those a model runs on a
fused or fast layer) one layer built from the preset's cell and norm, run the way a model runs it
(`lnbench.nn.fast.layers.fast_layer`): torch's fused kernel for no norm and weight norm (`impl=torch`),
lnbench's C++ kernels for the LN/BN LSTM and GRU and the un-normalized GRU (`impl=native`) and, beside
them, the same layer on torch's ops alone (`impl=ops`, what runs without a C++ compiler) or for the
un-normalized GRU torch's GRU (`impl=torch`, what `model.impl=torch` runs), and with `--ref` also the
reference Python loop (`impl=ref`). The baseline is `torch.nn.LSTM` / `torch.nn.GRU` at the same shape,
timed in the same run. On CUDA (`--device cuda`, no TF32) the LN-LSTM has `impl=triton` (docs/performance.md, "GPU").

Timing: every measured candidate of one shape runs in turn, A B C, B C A, C A B, ... (this machine is
shared and noisy, so a slow spell hits all of them; the order rotates because a step's time depends on
what ran just before it), after `--warmup` untimed steps each. We report the
median and the IQR of the step times, the min, samples/s at the median, and `ratio` = the median over
rounds of (candidate time / baseline time in the same round), which is what to quote.

Memory (`mem_mb`): on CUDA, torch.cuda.max_memory_allocated over one step minus what was allocated
before it. On CPU, the bytes of the tensors kept for the backward (saved by autograd or by a custom
autograd.Function; distinct storages counted once), i.e. the activation memory of one step; the CPU
allocator has no peak counter and RSS growth is dominated by the allocator's caching.

The MLP rows (784-1000-1000-10, norm none/batch/layer, batch 4 and 128) time one optimizer step
(forward, backward, Adam) with torch's fused Adam against the default (foreach) Adam; the ratio is
fused / foreach.

The bandwidth rows (`--bandwidth`, on by default, off with --quick) split the MLP's step (fused Adam, batch 4 and
128) into forward, backward and optimizer, and set each phase's least bytes over its time against the machine's
STREAM triad (lnbench.bench.bandwidth).

The train rows (`--train`, on by default, off with --quick) time `lnbench train` of each recurrent preset
(TRAIN_RUNS; with --models, those presets' plain runs only) on the adding task at the first shape, runs in
turn, on the thread count asked (`threads_follow=false`), against its family's un-normalized preset, with the
LN-LSTM also on torch's ops alone (model.impl=torch): what a user's run costs. After them, each run's step is
split by torch's profiler (lnbench.bench.runs.step_split): its recurrent layer, the optimizer, the rest; the
log gives each part against the baseline's, and the whole run's ratio, evaluations and checkpoints included.

The runner rows time a whole `lnbench train` run's steps (metrics file, logging, checkpoints) against
a bare loop of the same model, optimizer and batches, interleaved run by run (`--no-runner` skips it).

The sweep row (`--sweep`, on by default, off with --quick) is the wall time of fig6_mnist's sweep (one lr, one seed:
8 jobs at the preset's equal epochs, `--sweep-epochs` to shrink them) with the joblib launcher over that with the
basic one.

The check-throughput rows (`--throughput`, on by default, off with --quick) predict, per claim preset, what
`lnbench check` does on this machine: jobs per minute and the fixed cost per job (lnbench.bench.throughput says
how: sampled jobs at 1 and at --throughput-steps steps, their phases, the preset's full sweep extrapolated).

Results also go to JSON (`--json`, default bench-results/bench-<timestamp>.json) so commits can be
compared.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import torch
from rich.console import Console
from rich.table import Table

from lnbench.atomic import unwritable, write_bytes
from lnbench.bench.bandwidth import mlp_bandwidth_rows
from lnbench.bench.device import gpu_meta, measured_on, own_kernels
from lnbench.bench.kernels import bench_mlp, bench_rnn, fast_rnn_models, rnn_presets
from lnbench.bench.runs import runner_overhead_rows, sweep_rows, train_rows
from lnbench.bench.throughput import print_rows as print_throughput
from lnbench.bench.throughput import throughput_rows
from lnbench.config import user_folder
from lnbench.errors import ConfigError, OptionsParser
from lnbench.training.device import cuda_settings, resolve_device
from lnbench.training.provenance import cpu_model

DEFAULT_SHAPES = [(32, 100, 256), (4, 100, 256), (128, 100, 256), (32, 400, 256), (32, 100, 1000), (100, 784, 100)]
QUICK_SHAPES = [(32, 100, 256), (4, 50, 256)]
FULL_SHAPES = [(b, t, h) for h in (256, 1000) for t in (50, 100, 400) for b in (1, 4, 32, 128)]
MLP_BATCHES = (4, 128)

COLUMNS = [
    "section",
    "model",
    "impl",
    "batch",
    "seq_len",
    "hidden",
    "input_size",
    "reps",
    "ms_median",
    "ms_iqr",
    "ms_min",
    "ms_max",
    "samples_per_s",
    "mem_mb",
    "baseline",
    "baseline_ms_median",
    "ratio",
]


def _parse_shapes(text: str) -> list[tuple[int, int, int]]:
    shapes = []
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            b, t, h = (int(v) for v in part.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"shape {part!r} is not BATCHxSEQ_LENxHIDDEN, e.g. 32x100x256") from None
        if min(b, t, h) < 1:
            raise argparse.ArgumentTypeError(f"shape {part!r} is not allowed: batch, length and width must be >= 1")
        shapes.append((b, t, h))
    if not shapes:
        raise argparse.ArgumentTypeError("no shape given: name at least one BATCHxSEQ_LENxHIDDEN, e.g. 32x100x256")
    return shapes


def _parse_models(text: str) -> list[str]:
    models = [m.strip() for m in text.split(",") if m.strip()]
    known = [*rnn_presets(), "mlp"]
    bad = [m for m in models if m not in known]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown model(s) {bad}: choose from {known}")
    if not models:
        raise argparse.ArgumentTypeError("no model given: name at least one")
    return models


class Refused(Exception):
    """Bad input to `lnbench bench`: one paragraph, exit 2, nothing timed or written."""


def build_parser() -> argparse.ArgumentParser:
    p = OptionsParser(
        prog="lnbench bench",
        refuse=Refused,
        description="Time per training step (fwd+bwd) of each model vs torch's fused LSTM/GRU, interleaved.",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help=f"shapes {QUICK_SHAPES}, 3 reps, MLP at batch 4 only (< 1 min)")
    g.add_argument(
        "--full", action="store_true", help="the full grid: batch 1/4/32/128 x seq_len 50/100/400 x hidden 256/1000"
    )
    p.add_argument(
        "--models",
        type=_parse_models,
        default=None,
        help="comma list of recurrent model presets and/or mlp "
        "(default: the presets with a fused or fast layer, and mlp)",
    )
    p.add_argument(
        "--shapes", type=_parse_shapes, default=None, help="comma list of BATCHxSEQ_LENxHIDDEN (overrides the preset)"
    )
    p.add_argument("--reps", type=int, default=None, help="timed steps per candidate (default 7; --quick 3)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per candidate first (default 2)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--input-size", type=int, default=64, help="input features of the recurrent layer (default 64)")
    p.add_argument("--ref", action="store_true", help="also time the reference Python loop (RecurrentLayer)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument(
        "--json", type=Path, default=None, help="where to write results (default bench-results/bench-<timestamp>.json)"
    )
    p.add_argument(
        "--runner",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time a `lnbench train` step against a bare loop of the same model (default on)",
    )
    p.add_argument("--runner-steps", type=int, default=100, help="steps of each runner-overhead run (default 100)")
    section(p, "train", "time `lnbench train` of each recurrent preset at the first shape")
    p.add_argument("--train-steps", type=int, default=100, help="steps of each `lnbench train` run (default 100)")
    section(p, "bandwidth", "the MLP step's phases against the machine's memory bandwidth")
    section(p, "sweep", "time fig6_mnist's sweep, joblib vs basic launcher")
    p.add_argument(
        "--sweep-epochs", type=float, default=None, help="epochs per sweep job (default the preset's 2; --quick 0.25)"
    )
    section(p, "throughput", "predict `lnbench check`'s jobs per minute and fixed cost per job, per claim preset")
    p.add_argument("--throughput-presets", type=_parse_presets, default=None, help="comma list (default: all)")
    p.add_argument("--throughput-jobs", type=int, default=6, help="jobs sampled per preset (default 6)")
    p.add_argument("--throughput-steps", type=int, default=20, help="steps of the longer sample (default 20)")
    return p


def section(p: argparse.ArgumentParser, name: str, what: str) -> None:
    """--NAME / --no-NAME for a section of rows that runs by default, and not with --quick (`wanted`)."""
    p.add_argument(
        f"--{name}", action=argparse.BooleanOptionalAction, default=None, help=f"{what} (default on, off with --quick)"
    )


def wanted(args: argparse.Namespace, name: str) -> bool:
    """Whether a `section` runs: as asked, else unless --quick."""
    asked = getattr(args, name)
    return not args.quick if asked is None else asked


def _parse_presets(text: str) -> list[str]:
    from lnbench.check.args import claim_presets  # noqa: PLC0415 (check's modules: when asked)

    names, known = [n.strip() for n in text.split(",") if n.strip()], claim_presets()
    if bad := [n for n in names if n not in known] or (not names and ["(none)"]):
        raise argparse.ArgumentTypeError(f"{', '.join(bad)} is not a claim preset: use {', '.join(known)}")
    return names


def _git_commit() -> Optional[str]:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _print_table(rows: list[dict], meta: dict) -> None:
    table = Table(
        title=f"lnbench bench: ms per training step (fwd+bwd) on {measured_on(meta)}, {meta['device']}, "
        f"{meta['dtype']}; lnbench's kernels: {meta['kernels']}"
    )
    for col in ("model", "impl", "B", "T", "H", "median ms", "IQR", "min", "samples/s", "mem MB", "baseline", "ratio"):
        table.add_column(col, justify="left" if col in ("model", "impl", "baseline") else "right")

    def cell(v) -> str:
        return "-" if v is None else str(v)

    for r in rows:
        table.add_row(
            r["model"],
            r["impl"],
            cell(r["batch"]),
            cell(r["seq_len"]),
            cell(r["hidden"]),
            f"{r['ms_median']:.1f}",
            f"{r['ms_iqr']:.1f}",
            f"{r['ms_min']:.1f}",
            cell(r["samples_per_s"] and f"{r['samples_per_s']:.0f}"),
            cell(r["mem_mb"] and f"{r['mem_mb']:.1f}"),
            r["baseline"],
            f"{r['ratio']:.2f}x",
        )
    console = Console(width=max(Console().width, 150))
    console.print(table)
    console.print(
        "ratio: median over rounds of (row / baseline in the same round). mem MB: "
        + (
            "CUDA peak allocated over one step."
            if meta["device"].startswith("cuda")
            else "tensors kept for the backward (activation memory), CPU."
        )
    )


LEAST = {
    "threads": 1,
    "reps": 1,
    "warmup": 0,
    "input_size": 1,
    "runner_steps": 1,
    "train_steps": 1,
    "throughput_jobs": 1,
    "throughput_steps": 2,
}


def checked_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, each checked before anything is timed or written; Refused names the first bad one."""
    args = build_parser().parse_args(argv)
    for name, least in LEAST.items():
        value = getattr(args, name)
        if value is not None and value < least:
            raise Refused(f"--{name.replace('_', '-')}={value} is not allowed: it must be an integer >= {least}")
    if args.sweep_epochs is not None and not args.sweep_epochs > 0:
        raise Refused(f"--sweep-epochs={args.sweep_epochs} is not allowed: it must be a number of epochs > 0")
    try:  # a run's own rule for its device; the bench times the CPU and CUDA only
        args.device = resolve_device(args.device, "--device", kinds=("cpu", "cuda"))
    except ConfigError as e:
        raise Refused(str(e).rstrip(".")) from None
    args.json = args.json or Path("bench-results") / f"bench-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    try:  # the runs it times compose with your own defaults: a broken file is said now, not by each sample sweep
        user_folder.check([])
    except ConfigError as e:
        raise Refused(str(e).rstrip(".")) from None
    # before minutes of measuring: results that cannot be written at the end would be lost
    why = f"{args.json} is a directory" if args.json.is_dir() else unwritable(args.json.parent)
    if why:
        raise Refused(
            f"--json={args.json} is not allowed: the results cannot be written there ({why}); give a file in a "
            "folder you can write to"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = checked_args(argv)
    except Refused as e:
        print(f"lnbench: error: {str(e).rstrip('.')}.", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    cuda_settings(args.device)  # float32 without TF32, as a run on CUDA computes
    t0 = time.perf_counter()
    rows, reps = timed_rows(args)
    meta = {
        "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "kernels": own_kernels(args.device),
        **gpu_meta(args.device),
        "cpu_count": os.cpu_count(),
        "load_avg": round(os.getloadavg()[0], 2),
        "threads": args.threads,
        "device": str(args.device),
        "dtype": args.dtype,
        "reps": reps,
        "warmup": args.warmup,
        "argv": list(argv) if argv is not None else None,
        "seconds": round(time.perf_counter() - t0, 1),
        "columns": COLUMNS,
    }
    _print_table([r for r in rows if r["section"] != "throughput"], meta)
    print_throughput([r for r in rows if r["section"] == "throughput"], args.throughput_jobs, args.throughput_steps)
    results = json.dumps({"meta": meta, "rows": rows}, indent=1)
    try:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(args.json, results.encode())
    except OSError as e:  # checked before, yet refused now (a full disk): the numbers are not lost
        print(results)
        print(
            f"lnbench: error: --json={args.json} could not be written ({e.strerror or e}); the results are above.",
            file=sys.stderr,
        )
        return 1
    print(f"wrote {args.json} ({meta['seconds']} s)", flush=True)
    return 0


def timed_rows(args: argparse.Namespace) -> tuple[list[dict], int]:
    """Every section the options ask for, in order; (rows, reps)."""

    def log(msg: str) -> None:
        print(msg, flush=True)

    device, dtype = args.device, getattr(torch, args.dtype)
    shapes = args.shapes or (QUICK_SHAPES if args.quick else FULL_SHAPES if args.full else DEFAULT_SHAPES)
    reps = args.reps or (3 if args.quick else 7)
    rows: list[dict] = []
    models = args.models or [*fast_rnn_models(), "mlp"]
    if rnn_models := [m for m in models if m in rnn_presets()]:
        log(f"recurrent layers ({len(shapes)} shapes, {reps} reps each):")
        rows += bench_rnn(rnn_models, shapes, reps, args.warmup, args.input_size, device, dtype, args.ref, log)
    if "mlp" in models:
        log("MLP 784-1000-1000-10, fused vs foreach Adam:")
        rows += bench_mlp(reps, args.warmup, device, dtype, (4,) if args.quick else MLP_BATCHES, log)
    if wanted(args, "bandwidth"):
        log("MLP step against the memory bandwidth (least bytes of each phase / its time, vs STREAM triad):")
        rows += mlp_bandwidth_rows(reps, args.warmup, MLP_BATCHES, log)
    if wanted(args, "train"):
        log("lnbench train per step, each preset against its family's un-normalized one:")
        shape = (args.shapes or DEFAULT_SHAPES)[0]
        rows += train_rows(shape, max(2, reps // 3), args.train_steps, device, log, models=args.models)
    if args.runner:
        log("runner overhead (lnbench train vs a bare loop of the same model and batches):")
        rows += runner_overhead_rows(reps, args.runner_steps, device, log)
    if wanted(args, "sweep"):
        log("sweep wall time (fig6_mnist, joblib vs basic launcher):")
        rows += sweep_rows(1 if args.quick else 2, args.sweep_epochs or (0.25 if args.quick else None), log)
    if wanted(args, "throughput"):
        from lnbench.check.args import claim_presets  # noqa: PLC0415 (check's modules: when asked)

        log("check throughput per claim preset (sampled jobs at 1 and more steps, extrapolated):")
        presets = args.throughput_presets or claim_presets()
        rows += throughput_rows(presets, args.throughput_jobs, args.throughput_steps, log)
    return rows, reps


if __name__ == "__main__":
    raise SystemExit(main())
