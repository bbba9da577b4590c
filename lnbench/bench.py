"""`lnbench bench`: time per training step (forward + backward) of each model against torch's fused kernels.

The table's title names the CPU model, the instruction set torch's kernels dispatch to and the build of
lnbench's own kernels (AVX2, AVX512, ...; `ATEN_CPU_CAPABILITY=default|avx2|avx512` lowers both, to
compare builds on one machine).

Recurrent rows: for each recurrent model preset of conf/model (by default those a model runs on a
fused or fast layer) one layer built from the preset's cell and norm, run the way a model runs it
(`lnbench.nn.fast_rnn.fast_layer`): torch's fused kernel for no norm and weight norm (`impl=torch`),
lnbench's C++ kernels for the LN/BN LSTM (`impl=native`) and, beside them, the same layer on torch's ops
alone (`impl=ops`, what runs without a C++ compiler, and the GRU's path), and with `--ref` also the
reference Python loop (`impl=ref`). The baseline is `torch.nn.LSTM` / `torch.nn.GRU` at the same shape,
timed in the same run.

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

The train rows (`--train`, on by default, off with --quick) time `lnbench train` of each recurrent preset
(TRAIN_RUNS) on the adding task at the first shape, runs in turn, against its family's un-normalized
preset, with the LN-LSTM also on torch's ops alone (model.impl=torch): what a user's run costs.

The runner rows time a whole `lnbench train` run's steps (metrics file, logging, checkpoints) against
a bare loop of the same model, optimizer and batches, interleaved run by run (`--no-runner` skips it).

The sweep row (`--sweep`, on by default, off with --quick) is the wall time of fig6_mnist's sweep (one lr, one seed: 8 jobs
at the preset's equal epochs, `--sweep-epochs` to shrink them) with the joblib launcher over that with the basic one.

Results also go to JSON (`--json`, default bench-results/bench-<timestamp>.json) so commits can be
compared.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from lnbench.nn import native
from lnbench.provenance import cpu_model

DEFAULT_SHAPES = [(32, 100, 256), (4, 100, 256), (128, 100, 256), (32, 400, 256), (32, 100, 1000), (100, 784, 100)]
QUICK_SHAPES = [(32, 100, 256), (4, 50, 256)]
FULL_SHAPES = [(b, t, h) for h in (256, 1000) for t in (50, 100, 400) for b in (1, 4, 32, 128)]
MLP_BATCHES = (4, 128)

COLUMNS = [
    "section", "model", "impl", "batch", "seq_len", "hidden", "input_size", "reps", "ms_median",
    "ms_iqr", "ms_min", "ms_max", "samples_per_s", "mem_mb", "baseline", "baseline_ms_median", "ratio",
]


# What the runner's overhead is measured on: the default run, and Figure 6's MLP where MNIST is found.
OVERHEAD_RUNS = {
    "ln_lstm/adding": ["model=ln_lstm", "dataset=adding"],
    "ln_mlp/mnist": ["model=ln_mlp", "dataset=mnist", "dataset.carve=[2048,256,256]"],
}


def runner_overhead_rows(reps: int, steps: int, device: torch.device, log) -> list[dict]:
    """A `lnbench train` step (logging, metrics file, checkpoints, progress) against the same model,
    optimizer and batches in a bare loop, interleaved run by run. The ratio should stay within 1.1."""
    import tempfile

    from hydra import compose, initialize_config_dir

    from lnbench.config import CONF_DIR, register_configs
    from lnbench.errors import UserError
    from lnbench.train import seed_everything, setup_model, setup_optimizer, train, train_step

    register_configs()
    rows = []
    for name, overrides in OVERHEAD_RUNS.items():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("train", overrides=[*overrides, f"steps={steps}", f"eval_every={steps}", "logger=none",
                                              "progress=false", f"device={device.type}", f"threads={torch.get_num_threads()}"])
        try:
            from hydra.utils import instantiate

            dataset = instantiate(cfg.dataset, _convert_="all")
        except UserError as e:
            log(f"  {name}: skipped ({e})")
            continue

        def bare() -> float:
            seed_everything(cfg.seed)
            model = setup_model(cfg.model, dataset.spec, device)
            optimizer, scheduler = setup_optimizer(cfg.optim, cfg.schedule, model, device)
            _sync(device)
            t0 = time.perf_counter()
            for step in range(steps):
                train_step(model, optimizer, scheduler, dataset.spec, dataset.train_batch(step), device, None)
            _sync(device)
            return (time.perf_counter() - t0) / steps * 1e3

        def runner() -> float:
            with tempfile.TemporaryDirectory() as d:
                return train(cfg, Path(d))["time_per_step"] * 1e3

        log(f"  {name}: {reps} x (lnbench train, bare loop) of {steps} steps")
        pairs = [(runner(), bare()) for _ in range(reps)]
        run_ts, bare_ts = [p[0] for p in pairs], [p[1] for p in pairs]
        st = _stats(run_ts)
        rows.append({
            "section": "runner", "model": name, "impl": "lnbench train", "batch": dataset.batch_size,
            "seq_len": dataset.spec.seq_len or None, "hidden": None, "input_size": None, "reps": reps, **st,
            "samples_per_s": dataset.batch_size / (st["ms_median"] / 1e3), "mem_mb": None,
            "baseline": "bare loop", "baseline_ms_median": statistics.median(bare_ts),
            "ratio": statistics.median(a / b for a, b in pairs),
        })
    return rows


# What a user's `lnbench train` costs per step at one shape, each recurrent preset against its family's
# un-normalized preset, and the LN-LSTM also on torch's ops alone (model.impl=torch).
TRAIN_RUNS = {
    "lstm": ["model=lstm"], "ln_lstm": ["model=ln_lstm"], "ln_lstm/torch ops": ["model=ln_lstm", "model.impl=torch"],
    "bn_lstm": ["model=bn_lstm"], "gru": ["model=gru"], "ln_gru": ["model=ln_gru"],
}


def train_rows(shape: tuple[int, int, int], reps: int, steps: int, device: torch.device, log) -> list[dict]:
    """`lnbench train` on the adding task at `shape` (batch, seq_len, hidden), every run of TRAIN_RUNS in
    turn, `reps` rounds: ms per training step from each run's summary (evaluation and checkpoints apart)."""
    import tempfile

    from hydra import compose, initialize_config_dir

    from lnbench.config import CONF_DIR, register_configs
    from lnbench.train import train

    register_configs()
    B, T, H = shape
    cfgs = {}
    for name, overrides in TRAIN_RUNS.items():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfgs[name] = compose("train", overrides=[
                *overrides, "dataset=adding", f"dataset.batch_size={B}", f"dataset.seq_len={T}", f"model.hidden_size={H}",
                f"steps={steps}", f"eval_every={steps}", "dataset.val_size=256", "dataset.test_size=256", "logger=none",
                "progress=false", f"device={device.type}", f"threads={torch.get_num_threads()}"])
    log(f"  B={B} T={T} H={H}: {reps} rounds x ({', '.join(cfgs)}) of {steps} steps")
    times: dict[str, list[float]] = {n: [] for n in cfgs}
    names = list(cfgs)
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            with tempfile.TemporaryDirectory() as d:
                times[name].append(train(cfgs[name], Path(d))["time_per_step"] * 1e3)
    rows = []
    for name, ts in times.items():
        base = "gru" if "gru" in name else "lstm"
        st = _stats(ts)
        rows.append({
            "section": "train", "model": name.split("/")[0], "impl": "lnbench train" + (f", {name.split('/')[1]}" if "/" in name else ""),
            "batch": B, "seq_len": T, "hidden": H, "input_size": 2, "reps": reps, **st,
            "samples_per_s": B / (st["ms_median"] / 1e3), "mem_mb": None, "baseline": f"{base} (lnbench train)",
            "baseline_ms_median": statistics.median(times[base]),
            "ratio": statistics.median(a / b for a, b in zip(ts, times[base])),
        })
    return rows


# The default run's step (model ln_lstm, adding: batch 64, seq_len 50, hidden 128; input 2 features).
def sweep_rows(reps: int, epochs: Optional[float], log) -> list[dict]:
    """fig6_mnist's sweep (8 jobs: model x batch size, one lr and seed) with the joblib launcher against the basic one, wall time of the whole
    `lnbench train -m` command, interleaved. Skipped where MNIST or the joblib launcher is missing.

    The jobs train as the preset has them, at equal epochs: a batch-4 job takes 32 times the steps of a
    batch-128 one. `epochs` (None: the preset's own 2) scales all of them alike; a fixed step count for
    every job would time a different sweep, one that the batch-128 jobs dominate. Each run records the
    machine's 1-minute load average after it: with a neighbour on one of 2 cores, joblib's two workers
    share one core and the ratio says more about the neighbour than about the launcher."""
    import subprocess
    import sys
    import tempfile

    # One learning rate and one seed: the preset's model x batch size grid, as many jobs as a small sweep has.
    cmd = [sys.executable, "-m", "lnbench.cli", "train", "-m", "+experiment=fig6_mnist", "optim.lr=0.001", "seed=0",
           "logger=none", "progress=false"]
    if epochs is not None:  # the preset's own formulas (2 epochs, 8 evaluations), with `epochs` in place of its 2
        carve = "${oc.select:dataset.carve.0,55000}"
        cmd += [f"steps='${{lnbench.epochs:{epochs},${{dataset.batch_size}},{carve}}}'",
                f"eval_every='${{lnbench.epochs:{epochs / 8},${{dataset.batch_size}},{carve}}}'"]
    launchers = {"basic": [], "joblib": ["hydra/launcher=joblib"]}
    walls: dict[str, list[float]] = {k: [] for k in launchers}
    loads: dict[str, list[float]] = {k: [] for k in launchers}
    log(f"  fig6_mnist sweep ({'2 epochs, the preset' if epochs is None else f'{epochs} epochs'} per job): {reps} x (basic, joblib)")
    for _ in range(reps):
        for name, extra in launchers.items():
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                proc = subprocess.run([*cmd, *extra, f"hydra.sweep.dir={d}"], capture_output=True, text=True)
                wall = time.perf_counter() - t0
            if proc.returncode != 0:
                log(f"  sweep with the {name} launcher failed, skipped: {proc.stderr.strip()[-300:]}")
                return []
            walls[name].append(wall)
            loads[name].append(round(os.getloadavg()[0], 2))
            log(f"    {name:6s} {wall:6.1f} s  (load average {loads[name][-1]:.1f})")
    st = _stats([w * 1e3 for w in walls["joblib"]])
    return [{
        "section": "sweep", "model": "fig6_mnist (8 jobs)", "impl": "joblib launcher", "batch": None,
        "seq_len": None, "hidden": None, "input_size": None, "reps": reps, **st, "samples_per_s": None,
        "mem_mb": None, "baseline": "basic launcher", "baseline_ms_median": statistics.median(walls["basic"]) * 1e3,
        "ratio": statistics.median(j / b for j, b in zip(walls["joblib"], walls["basic"])),
        "load_avg": loads,
    }]


# --------------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------------
@dataclass
class Candidate:
    name: str  # model name as shown
    impl: str
    step: Callable[[], None]  # one training step
    mem: Callable[[], Optional[float]]  # MB, see the module doc
    is_baseline: bool = False


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_interleaved(cands: list[Candidate], reps: int, warmup: int, device: torch.device) -> dict[str, list[float]]:
    """Each candidate's step times, one step of each per round. The order rotates from round to round:
    a step's time depends on what ran just before it (the same C LSTM measured 1.07x nn.LSTM right
    after it and 1.00x one place later), so every candidate takes every place equally often."""
    for c in cands:
        for _ in range(warmup):
            c.step()
    _sync(device)
    times: dict[str, list[float]] = {c.name + "/" + c.impl: [] for c in cands}
    for r in range(reps):
        for c in cands[r % len(cands):] + cands[:r % len(cands)]:
            _sync(device)
            t0 = time.perf_counter()
            c.step()
            _sync(device)
            times[c.name + "/" + c.impl].append((time.perf_counter() - t0) * 1e3)
    return times


def _stats(ts: list[float]) -> dict:
    q = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) > 1 else [ts[0]] * 3
    return {
        "ms_median": statistics.median(ts),
        "ms_iqr": q[2] - q[0],
        "ms_min": min(ts),
        "ms_max": max(ts),
    }


def _saved_mb(fn: Callable[[], torch.Tensor]) -> float:
    """MB of distinct storages saved for backward while running fn (which returns the loss)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        try:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        except Exception:  # noqa: BLE001 - a tensor without storage (e.g. sparse): count its elements
            seen[id(t)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn()
    loss.backward()
    return sum(seen.values()) / 2**20


def _mem_mb(fn: Callable[[], torch.Tensor], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn().backward()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    return _saved_mb(fn)


# --------------------------------------------------------------------------------------------------
# Recurrent models
# --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def rnn_presets() -> dict[str, tuple[str, dict]]:
    """{preset: (cell, norm)} for every recurrent model preset of conf/model, read from its YAML over the
    schema's defaults, so the bench times the cells the presets train (issue 11: no second list)."""
    import yaml
    from omegaconf import OmegaConf

    from lnbench.config import CONF_DIR, SequenceModelConfig, model_presets

    found = {}
    for name in model_presets("base_sequence"):
        own = yaml.safe_load((CONF_DIR / "model" / f"{name}.yaml").read_text()) or {}
        own.pop("defaults", None)
        cfg = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(SequenceModelConfig), own), enum_to_str=True)
        found[name] = (cfg["cell"], cfg["norm"])
    return found


def _preset_cell(model: str, F: int, H: int, T: int) -> nn.Module:
    from lnbench.nn.norm import as_norm_config
    from lnbench.nn.rnn import CELLS

    cell, norm = rnn_presets()[model]
    return CELLS[cell](F, H, as_norm_config(dict(norm)), time_steps=T)


def fast_rnn_models() -> list[str]:
    """The recurrent presets a model runs on a fused or fast layer (the default rows); the others run the
    reference loop (`impl=ref`), timed only when named with --models."""
    return [m for m in rnn_presets() if _impls_for(m, False) != ["ref"]]


def _rnn_layer(model: str, impl: str, F: int, H: int, T: int, device, dtype) -> nn.Module:
    from lnbench.nn.fast_rnn import fast_layer
    from lnbench.nn.rnn import RecurrentLayer

    cell = _preset_cell(model, F, H, T).to(device=device, dtype=dtype)
    layer = RecurrentLayer(cell) if impl == "ref" else fast_layer(cell, use_native=impl != "ops")
    if layer is None:
        raise ValueError(f"{model}: no {impl} implementation")
    return layer


def _impls_for(model: str, with_ref: bool) -> list[str]:
    """How a model runs the preset's cell, first as SequenceModel picks it: "torch" (torch's fused kernel),
    "native" (lnbench's C++ kernels, then "ops" beside it: the same layer on torch's ops only) or "ops";
    and "ref" with --ref or when that is the only way."""
    from lnbench.nn.fast_rnn import TorchKernelLayer, fast_layer

    layer = fast_layer(_preset_cell(model, 4, 4, 2))
    if layer is None:
        impls = []
    elif isinstance(layer, TorchKernelLayer):
        impls = ["torch"]
    else:
        impls = ["native", "ops"] if layer.native(torch.zeros(1)) else ["ops"]
    return impls + (["ref"] if with_ref or not impls else [])


def _rnn_candidate(name: str, impl: str, layer: nn.Module, x: torch.Tensor, device, baseline=False) -> Candidate:
    def loss():
        out, _ = layer(x)
        return out.sum()

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        loss().backward()

    return Candidate(name, impl, step, lambda: _mem_mb(loss, device), baseline)


def bench_rnn(models: list[str], shapes, reps: int, warmup: int, F: int, device, dtype, with_ref: bool, log) -> list[dict]:
    rows: list[dict] = []
    for B, T, H in shapes:
        for family in ("lstm", "gru"):
            fam_models = [m for m in models if rnn_presets()[m][0] == family]
            if not fam_models:
                continue
            torch.manual_seed(0)
            x = torch.randn(T, B, F, device=device, dtype=dtype, requires_grad=True)
            base_mod = (nn.LSTM if family == "lstm" else nn.GRU)(F, H).to(device=device, dtype=dtype)
            base_name = f"nn.{family.upper()}"
            cands = [_rnn_candidate(base_name, "torch", base_mod, x, device, baseline=True)]
            for m in fam_models:
                for impl in _impls_for(m, with_ref):
                    if rnn_presets()[m][1]["kind"] == "batch" and B < 2:
                        continue  # BN cannot train at batch 1
                    cands.append(_rnn_candidate(m, impl, _rnn_layer(m, impl, F, H, T, device, dtype), x, device))
            log(f"  B={B} T={T} H={H}: {', '.join(c.name + '/' + c.impl for c in cands)}")
            times = _time_interleaved(cands, reps, warmup, device)
            base_ts = times[base_name + "/torch"]
            for c in cands:
                ts = times[c.name + "/" + c.impl]
                st = _stats(ts)
                rows.append({
                    "section": "rnn", "model": c.name, "impl": c.impl, "batch": B, "seq_len": T, "hidden": H,
                    "input_size": F, "reps": reps, **st,
                    "samples_per_s": B / (st["ms_median"] / 1e3),
                    "mem_mb": c.mem(),
                    "baseline": base_name, "baseline_ms_median": statistics.median(base_ts),
                    "ratio": statistics.median(a / b for a, b in zip(ts, base_ts)),
                })
    return rows


# --------------------------------------------------------------------------------------------------
# MLP (section 6.6): fused vs foreach Adam
# --------------------------------------------------------------------------------------------------
def _mlp(norm: str, device, dtype) -> nn.Module:
    """The MLP presets' model (784-1000-1000-10) with normalizer `norm`, built by lnbench's own class."""
    from lnbench.data.base import DataSpec
    from lnbench.models import MLP

    spec = DataSpec(kind="flat", task="classify", num_outputs=10, input_size=784)
    return MLP(spec, [1000, 1000], {"kind": norm}).to(device=device, dtype=dtype)


def bench_mlp(reps: int, warmup: int, device, dtype, batches, log) -> list[dict]:
    rows: list[dict] = []
    for B in batches:
        for norm in ("none", "batch", "layer"):
            torch.manual_seed(0)
            x = torch.randn(B, 784, device=device, dtype=dtype)
            y = torch.randint(0, 10, (B,), device=device)
            cands = []
            for impl in ("foreach", "fused"):
                model = _mlp(norm, device, dtype)
                try:
                    opt = torch.optim.Adam(model.parameters(), lr=1e-4, **{impl: True})
                except (RuntimeError, TypeError, ValueError) as e:  # fused Adam missing on this device/torch
                    log(f"  mlp {norm} B={B}: no {impl} Adam here ({e})")
                    continue

                def loss(model=model):
                    return nn.functional.cross_entropy(model(x), y)

                def step(model=model, opt=opt, loss=loss):
                    opt.zero_grad(set_to_none=True)
                    loss().backward()
                    opt.step()

                name = {"none": "mlp", "batch": "bn_mlp", "layer": "ln_mlp"}[norm]
                cands.append(Candidate(name, f"adam_{impl}", step, lambda loss=loss: _mem_mb(loss, device), impl == "foreach"))
            if not cands:
                continue
            log(f"  B={B} {cands[0].name}: {', '.join(c.impl for c in cands)}")
            times = _time_interleaved(cands, reps, warmup, device)
            base = cands[0]
            base_ts = times[base.name + "/" + base.impl]
            for c in cands:
                ts = times[c.name + "/" + c.impl]
                st = _stats(ts)
                rows.append({
                    "section": "mlp", "model": c.name, "impl": c.impl, "batch": B, "seq_len": None,
                    "hidden": 1000, "input_size": 784, "reps": reps, **st,
                    "samples_per_s": B / (st["ms_median"] / 1e3), "mem_mb": c.mem(),
                    "baseline": f"{base.name}/{base.impl}", "baseline_ms_median": statistics.median(base_ts),
                    "ratio": statistics.median(a / b for a, b in zip(ts, base_ts)),
                })
    return rows


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------
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
    return shapes


def _parse_models(text: str) -> list[str]:
    models = [m.strip() for m in text.split(",") if m.strip()]
    known = [*rnn_presets(), "mlp"]
    bad = [m for m in models if m not in known]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown model(s) {bad}: choose from {known}")
    return models


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lnbench bench",
        description="Time per training step (fwd+bwd) of each model vs torch's fused LSTM/GRU, interleaved.",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help=f"shapes {QUICK_SHAPES}, 3 reps, MLP at batch 4 only (< 1 min)")
    g.add_argument("--full", action="store_true", help="the full grid: batch 1/4/32/128 x seq_len 50/100/400 x hidden 256/1000")
    p.add_argument("--models", type=_parse_models, default=None,
                   help="comma list of recurrent model presets and/or mlp (default: the presets with a fused or fast layer, and mlp)")
    p.add_argument("--shapes", type=_parse_shapes, default=None, help="comma list of BATCHxSEQ_LENxHIDDEN (overrides the preset)")
    p.add_argument("--reps", type=int, default=None, help="timed steps per candidate (default 7; --quick 3)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per candidate first (default 2)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--input-size", type=int, default=64, help="input features of the recurrent layer (default 64)")
    p.add_argument("--ref", action="store_true", help="also time the reference Python loop (RecurrentLayer)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--json", type=Path, default=None, help="where to write results (default bench-results/bench-<timestamp>.json)")
    p.add_argument("--runner", action=argparse.BooleanOptionalAction, default=True,
                   help="time a `lnbench train` step against a bare loop of the same model (default on)")
    p.add_argument("--runner-steps", type=int, default=100, help="steps of each runner-overhead run (default 100)")
    p.add_argument("--train", action=argparse.BooleanOptionalAction, default=None,
                   help="time `lnbench train` of each recurrent preset at the first shape (default on, off with --quick)")
    p.add_argument("--train-steps", type=int, default=100, help="steps of each `lnbench train` run (default 100)")
    p.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=None,
                   help="time fig6_mnist's sweep, joblib vs basic launcher (default on, off with --quick)")
    p.add_argument("--sweep-epochs", type=float, default=None,
                   help="epochs per sweep job (default the preset's 2; --quick 0.25)")
    return p


def _git_commit() -> Optional[str]:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _print_table(rows: list[dict], meta: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"lnbench bench: ms per training step (fwd+bwd) on {meta['cpu']} ({meta['isa']}), "
                        f"{meta['threads']} threads, {meta['device']}, {meta['dtype']}; lnbench's kernels: {meta['kernels']}")
    for col in ("model", "impl", "B", "T", "H", "median ms", "IQR", "min", "samples/s", "mem MB", "baseline", "ratio"):
        table.add_column(col, justify="left" if col in ("model", "impl", "baseline") else "right")
    def cell(v) -> str:
        return "-" if v is None else str(v)

    for r in rows:
        table.add_row(
            r["model"], r["impl"], cell(r["batch"]), cell(r["seq_len"]), cell(r["hidden"]),
            f"{r['ms_median']:.1f}", f"{r['ms_iqr']:.1f}", f"{r['ms_min']:.1f}", cell(r["samples_per_s"] and f"{r['samples_per_s']:.0f}"),
            cell(r["mem_mb"] and f"{r['mem_mb']:.1f}"), r["baseline"], f"{r['ratio']:.2f}x",
        )
    console = Console(width=max(Console().width, 150))
    console.print(table)
    console.print(
        "ratio: median over rounds of (row / baseline in the same round). mem MB: "
        + ("CUDA peak allocated over one step." if meta["device"].startswith("cuda") else
           "tensors kept for the backward (activation memory), CPU.")
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("threads", "reps", "warmup", "input_size", "runner_steps", "train_steps"):
        value, least = getattr(args, name), 0 if name == "warmup" else 1
        if value is not None and value < least:
            print(f"lnbench bench: --{name.replace('_', '-')}={value} is not allowed: it must be an integer >= {least}.",
                  file=sys.stderr)
            return 2
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("lnbench bench: --device cuda but torch sees no CUDA device.")
        return 2
    dtype = getattr(torch, args.dtype)
    torch.set_num_threads(args.threads)
    shapes = args.shapes or (QUICK_SHAPES if args.quick else FULL_SHAPES if args.full else DEFAULT_SHAPES)
    reps = args.reps or (3 if args.quick else 7)
    mlp_batches = (4,) if args.quick else MLP_BATCHES

    def log(msg: str) -> None:
        print(msg, flush=True)

    t0 = time.perf_counter()
    rows: list[dict] = []
    models = args.models or [*fast_rnn_models(), "mlp"]
    rnn_models = [m for m in models if m in rnn_presets()]
    if rnn_models:
        log(f"recurrent layers ({len(shapes)} shapes, {reps} reps each):")
        rows += bench_rnn(rnn_models, shapes, reps, args.warmup, args.input_size, device, dtype, args.ref, log)
    if "mlp" in models:
        log("MLP 784-1000-1000-10, fused vs foreach Adam:")
        rows += bench_mlp(reps, args.warmup, device, dtype, mlp_batches, log)
    if args.train if args.train is not None else not args.quick:
        log("lnbench train per step, each preset against its family's un-normalized one:")
        rows += train_rows((args.shapes or DEFAULT_SHAPES)[0], max(2, reps // 3), args.train_steps, device, log)
    if args.runner:
        log("runner overhead (lnbench train vs a bare loop of the same model and batches):")
        rows += runner_overhead_rows(reps, args.runner_steps, device, log)
    if args.sweep if args.sweep is not None else not args.quick:
        log("sweep wall time (fig6_mnist, joblib vs basic launcher):")
        rows += sweep_rows(1 if args.quick else 2, args.sweep_epochs or (0.25 if args.quick else None), log)

    meta = {
        "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "kernels": native.status(),
        "cpu_count": os.cpu_count(),
        "load_avg": round(os.getloadavg()[0], 2),
        "threads": args.threads,
        "device": str(device),
        "dtype": args.dtype,
        "reps": reps,
        "warmup": args.warmup,
        "argv": list(argv) if argv is not None else None,
        "seconds": round(time.perf_counter() - t0, 1),
        "columns": COLUMNS,
    }
    _print_table(rows, meta)
    path = args.json or Path("bench-results") / f"bench-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    log(f"wrote {path} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
