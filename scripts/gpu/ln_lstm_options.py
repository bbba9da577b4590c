"""The LN-LSTM layer on a GPU, each way of running it side by side against cuDNN's nn.LSTM (issue 41, item 2).

One training step of one layer (forward over the sequence, backward of a fixed weighting of its output), at
B=32 T=100 H=256 and B=4 (input width 64), float32 without TF32, timed interleaved (lnbench.bench.timing: each
option in turn, the order rotating), medians:

- cudnn: torch.nn.LSTM (no normalizer): the baseline;
- eager: lnbench's layer on torch's ops (model.impl=torch), a dozen launches per step forward, twenty backward;
- triton: lnbench's layer on its Triton kernels, every launch from Python (LNBENCH_CUDA_GRAPHS=0), two launches
  per step each way;
- triton-graphs: the same, each time loop replayed as a CUDA graph (lnbench.nn.fast.triton_graphs; what
  model.impl=auto runs on CUDA);
- graph-eager, graph-triton: the whole step (forward and backward) of eager or triton captured once as a CUDA
  graph and replayed (static shapes; the LN-LSTM has no per-step statistics to mind, unlike BN's running averages):
  how far a whole-step graph would go, not something a model runs;
- compile: the cell's step body under torch.compile (the Python time loop unrolled over compiled steps), in a
  process of its own that is stopped after --compile-limit seconds (then reported as such); first shape only.

Each option's output and gradients are compared with eager's (relative error of the norms). Writes one JSON
(--json) of rows; prints a table. `--device cpu` (the dry run): tiny shapes; graphs skipped; Triton only under
TRITON_INTERPRET=1 with LNBENCH_TRITON=interpret.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from lnbench.bench.timing import Candidate, summarize, time_interleaved
from lnbench.nn.fast.layers import NormalizedLayer, layer_path
from lnbench.nn.norm import NormConfig
from lnbench.nn.rnn import LSTMCell
from lnbench.training.device import cuda_settings

GPU_SHAPES = [(32, 100, 256), (4, 100, 256)]
CPU_SHAPES = [(4, 10, 32)]
F_IN = 64


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


class Setup:
    """One shape: the input, a fixed weighting of the output, and a cell whose parameters every option shares."""

    def __init__(self, B: int, T: int, H: int, device: torch.device):
        torch.manual_seed(0)
        self.B, self.T, self.H, self.device = B, T, H, device
        self.cell = LSTMCell(F_IN, H, NormConfig(kind="layer")).to(device)
        with torch.no_grad():  # gains and biases off 1 and 0, so that nothing is hidden
            for p in self.cell.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        self.x = torch.randn(T, B, F_IN, device=device, requires_grad=True)
        self.w = torch.randn(T, B, H, device=device)
        self.params = [self.x, *self.cell.parameters()]

    def loss(self, layer) -> torch.Tensor:
        out, _ = layer(self.x)
        return (out * self.w).sum()

    def step_of(self, layer):
        def step():
            for p in self.params:
                p.grad = None
            self.loss(layer).backward()

        return step

    def grads(self) -> list[torch.Tensor]:
        return [p.grad.detach().clone() for p in self.params]


def graphed(setup: Setup, layer):
    """The whole step captured as one CUDA graph (grads None before capture: the graph allocates them, and each
    replay writes them afresh); returns its replay."""
    step = setup.step_of(layer)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # compiles, cuBLAS handles and the autograd graph's first allocations: not captured
            step()
    torch.cuda.current_stream().wait_stream(side)
    for p in setup.params:
        p.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        setup.loss(layer).backward()
    static = [p.grad for p in setup.params]  # where each replay writes; other options' steps rebind .grad

    def replay():
        graph.replay()
        for p, g in zip(setup.params, static):
            p.grad = g

    return replay


def compiled_layer(cell: LSTMCell):
    """The reference loop over time with the cell's step body compiled (t is not an argument: one graph)."""
    body = torch.compile(lambda xp_t, h, c: cell.step(xp_t, (h, c), 0)[1], fullgraph=True, dynamic=False)

    def layer(x):
        xp = cell.project_input(x)
        h, c = cell.initial_state(x.shape[1], xp)
        outs = []
        for xp_t in xp.unbind(0):
            h, c = body(xp_t, h, c)
            outs.append(h)
        return torch.stack(outs), (h, c)

    return layer


def options(setup: Setup, only: str | None) -> dict:
    """{name: (step, error or None)}: every option that could be set up here."""
    found, device = {}, setup.device
    eager = NormalizedLayer(setup.cell, use_native=False)
    tri = NormalizedLayer(setup.cell, use_native=True, graphs=False)
    tri_graphs = NormalizedLayer(setup.cell, use_native=True, graphs=True)
    if only in (None, "cudnn"):
        lstm = nn.LSTM(F_IN, setup.H).to(device)
        found["cudnn"] = (setup.step_of(lambda x: lstm(x)), None)
    if only in (None, "eager"):
        found["eager"] = (setup.step_of(eager), None)
    for name, layer in (("triton", tri), ("triton-graphs", tri_graphs)):
        if only not in (None, name):
            continue
        if name == "triton-graphs" and device.type != "cuda":
            found[name] = (None, "skipped: needs CUDA")
        elif not layer.triton(setup.x):
            found[name] = (None, f"not run: {layer_path(layer, setup.x)}")
        else:
            found[name] = (setup.step_of(layer), None)
    for name, layer, usable in (("graph-eager", eager, True), ("graph-triton", tri, tri.triton(setup.x))):
        if only not in (None, name):
            continue
        if device.type != "cuda" or not usable:
            found[name] = (None, "skipped: needs CUDA" + ("" if usable else " and the Triton kernels"))
            continue
        try:
            found[name] = (graphed(setup, layer), None)
        except Exception as e:  # noqa: BLE001 - reported as the option's result
            found[name] = (None, f"{type(e).__name__}: {str(e)[:300]}")
    if only == "compile":
        t0 = time.perf_counter()
        step = setup.step_of(compiled_layer(setup.cell))
        step()  # the compilation
        found["compile"] = (step, None)
        found["compile_seconds"] = time.perf_counter() - t0
    return found


def measure(setup: Setup, only: str | None, reps: int, warmup: int) -> list[dict]:
    """Each option's median step time, its ratio to cudnn's (cudnn is always timed beside it) and its errors."""
    found = options(setup, only)
    compile_s = found.pop("compile_seconds", None)
    if only is not None and "cudnn" not in found:
        found = {**options(setup, "cudnn"), **found}
    rows = []
    # correctness: one step of each against eager's results (eager set up again when measured alone)
    reference = found.get("eager") or (setup.step_of(NormalizedLayer(setup.cell, use_native=False)), None)
    reference[0]()
    want = setup.grads()
    out_want, _ = NormalizedLayer(setup.cell, use_native=False)(setup.x)
    cands = []
    for name, (step, error) in found.items():
        row = {"option": name, "batch": setup.B, "seq_len": setup.T, "hidden": setup.H, "error": error}
        if step is not None and name != "cudnn":
            try:
                step()
                row["grad_rel_error"] = max(relative_error(g, w) for g, w in zip(setup.grads(), want))
            except Exception as e:  # noqa: BLE001
                row["error"], step = f"{type(e).__name__}: {str(e)[:300]}", None
        if name == "compile":
            row["compile_s"] = round(compile_s, 1)
        if step is not None:
            cands.append(Candidate(name, "", step, lambda: None, name == "cudnn"))
        rows.append(row)
    with torch.no_grad():
        row_of = {r["option"]: r for r in rows}
        for name, layer in (("eager", None), ("triton", NormalizedLayer(setup.cell, use_native=True, graphs=False))):
            if name in row_of and layer is not None and row_of[name]["error"] is None:
                row_of[name]["out_rel_error"] = relative_error(layer(setup.x)[0], out_want)
    times = time_interleaved(cands, reps, warmup, setup.device)
    base = times.get("cudnn/")
    for row in rows:
        ts = times.get(row["option"] + "/")
        if ts:
            row.update(summarize(ts))
            if base:
                row["ratio_to_cudnn"] = statistics.median(a / b for a, b in zip(ts, base))
    return rows


def compile_rows(args, B, T, H) -> list[dict]:
    """The compile option in a process of its own, stopped after --compile-limit seconds."""
    cmd = [sys.executable, __file__, "--only", "compile", "--device", args.device, "--shapes", f"{B}x{T}x{H}"]
    cmd += ["--reps", str(args.reps), "--warmup", str(args.warmup), "--json", "-"]
    base = {"option": "compile", "batch": B, "seq_len": T, "hidden": H}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.compile_limit, start_new_session=True)
    except subprocess.TimeoutExpired:
        return [{**base, "error": f"skipped: compiling took over {args.compile_limit} s"}]
    if done.returncode != 0:
        return [{**base, "error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    return [r for r in rows if r["option"] == "compile"]


def print_table(rows: list[dict]) -> None:
    print(f"{'option':13} {'B':>3} {'T':>4} {'H':>4} {'median ms':>10} {'x cuDNN':>8} {'grad err':>9}  note")
    for r in rows:
        ms = f"{r['ms_median']:.2f}" if "ms_median" in r else "-"
        ratio = f"{r['ratio_to_cudnn']:.2f}" if "ratio_to_cudnn" in r else "-"
        err = f"{r['grad_rel_error']:.1e}" if "grad_rel_error" in r else "-"
        note = r.get("error") or (f"compiled in {r['compile_s']} s" if "compile_s" in r else "")
        shape = f"{r['batch']:>3} {r['seq_len']:>4} {r['hidden']:>4}"
        print(f"{r['option']:13} {shape} {ms:>10} {ratio:>8} {err:>9}  {note}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--shapes", default=None, help="BxTxH,... (default: 32x100x256,4x100x256 on CUDA)")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", default=None)
    p.add_argument("--compile-limit", type=float, default=60.0)
    p.add_argument("--json", default="ln_lstm_options.json", help="where the rows go ('-': the last line of stdout)")
    args = p.parse_args()
    device = torch.device(args.device)
    cuda_settings(device)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else None
    shapes = shapes or (GPU_SHAPES if device.type == "cuda" else CPU_SHAPES)
    rows: list[dict] = []
    for i, (B, T, H) in enumerate(shapes):
        try:
            rows += measure(Setup(B, T, H, device), args.only, args.reps, args.warmup)
        except Exception as e:  # noqa: BLE001 - one shape's failure is a row; the others still run
            rows.append({"option": args.only or "all", "batch": B, "seq_len": T, "hidden": H, "error": repr(e)[:300]})
        if args.only is None and args.compile_limit > 0 and i == 0:  # at the first shape only: minutes of compiling
            rows += compile_rows(args, B, T, H)
        if args.json != "-":
            Path(args.json).write_text(json.dumps(rows, indent=1))  # after each shape: a later hang loses nothing
    if args.json == "-":
        print(json.dumps(rows))
    else:
        print_table(rows)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    raise SystemExit(main())
