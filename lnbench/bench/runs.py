"""`lnbench bench`'s timing of whole `lnbench train` runs: the runner's overhead against a bare loop, each
recurrent preset's step, and a sweep under the joblib launcher against the basic one (lnbench.bench.cli
describes the rows)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from lnbench.bench.timing import summarize, sync
from lnbench.config.schema import CONF_DIR, register_configs
from lnbench.errors import UserError
from lnbench.training.recipe import seed_everything, setup_model, setup_optimizer, train, train_step

# What the runner's overhead is measured on: the default run, and Figure 6's MLP where MNIST is found.
OVERHEAD_RUNS = {
    "ln_lstm/adding": ["model=ln_lstm", "dataset=adding"],
    "ln_mlp/mnist": ["model=ln_mlp", "dataset=mnist", "dataset.carve=[2048,256,256]"],
}


def runner_overhead_rows(reps: int, steps: int, device: torch.device, log) -> list[dict]:
    """A `lnbench train` step (logging, metrics file, checkpoints, progress) against the same model,
    optimizer and batches in a bare loop, interleaved run by run. The ratio should stay within 1.1."""

    register_configs()
    rows = []
    for name, overrides in OVERHEAD_RUNS.items():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(
                "train",
                overrides=[
                    *overrides,
                    f"steps={steps}",
                    f"eval_every={steps}",
                    "logger=none",
                    "progress=false",
                    f"device={device.type}",
                    f"threads={torch.get_num_threads()}",
                    "threads_follow=false",  # timed on the count asked for, whatever the load
                ],
            )
        try:
            dataset = instantiate(cfg.dataset, _convert_="all")
        except Exception as e:  # Hydra wraps the dataset's own refusal (no MNIST files here)
            cause = e if isinstance(e, UserError) else e.__cause__
            if not isinstance(cause, UserError):
                raise
            log(f"  {name}: skipped ({cause})")
            continue

        def runner() -> float:
            with tempfile.TemporaryDirectory() as d:
                return train(cfg, Path(d))["time_per_step"] * 1e3

        log(f"  {name}: {reps} x (lnbench train, bare loop) of {steps} steps")
        pairs = [(runner(), bare_loop_ms(cfg, dataset, steps, device)) for _ in range(reps)]
        run_ts, bare_ts = [p[0] for p in pairs], [p[1] for p in pairs]
        st = summarize(run_ts)
        rows.append(
            {
                "section": "runner",
                "model": name,
                "impl": "lnbench train",
                "batch": dataset.batch_size,
                "seq_len": dataset.spec.seq_len or None,
                "hidden": None,
                "input_size": None,
                "reps": reps,
                **st,
                "samples_per_s": dataset.batch_size / (st["ms_median"] / 1e3),
                "mem_mb": None,
                "baseline": "bare loop",
                "baseline_ms_median": statistics.median(bare_ts),
                "ratio": statistics.median(a / b for a, b in pairs),
            }
        )
    return rows


def bare_loop_ms(cfg, dataset, steps: int, device: torch.device) -> float:
    """ms per step of the run's model, optimizer and batches in a loop with nothing else."""

    seed_everything(cfg.seed)
    model = setup_model(cfg.model, dataset.spec, device)
    optimizer, scheduler = setup_optimizer(cfg.optim, cfg.schedule, model, device)
    sync(device)
    t0 = time.perf_counter()
    for step in range(steps):
        train_step(model, optimizer, scheduler, dataset.spec, dataset.train_batch(step), device, None)
    sync(device)
    return (time.perf_counter() - t0) / steps * 1e3


# What a user's `lnbench train` costs per step at one shape, each recurrent preset against its family's
# un-normalized preset, the LN-LSTM also on torch's ops alone and the GRU on torch's own kernel (model.impl=torch).
TRAIN_RUNS = {
    "lstm": ["model=lstm"],
    "ln_lstm": ["model=ln_lstm"],
    "ln_lstm/torch ops": ["model=ln_lstm", "model.impl=torch"],
    "bn_lstm": ["model=bn_lstm"],
    "gru": ["model=gru"],
    "gru/torch's GRU": ["model=gru", "model.impl=torch"],
    "ln_gru": ["model=ln_gru"],
    "bn_gru": ["model=bn_gru"],
}


def train_rows(
    shape: tuple[int, int, int], reps: int, steps: int, device: torch.device, log, models: Optional[list[str]] = None
) -> list[dict]:
    """`lnbench train` on the adding task at `shape` (batch, seq_len, hidden), every run of TRAIN_RUNS in
    turn (`models`: only those presets' plain runs), `reps` rounds: ms per training step from each run's summary
    (evaluation and checkpoints apart); then where each run's step goes (`step_split`), logged and in its row."""

    register_configs()
    B, T, H = shape
    cfgs = {}
    runs = {n: o for n, o in TRAIN_RUNS.items() if models is None or n in models}
    if not runs:  # `--models mlp`: no recurrent preset to run
        return []
    for name, overrides in runs.items():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfgs[name] = compose(
                "train",
                overrides=[
                    *overrides,
                    "dataset=adding",
                    f"dataset.batch_size={B}",
                    f"dataset.seq_len={T}",
                    f"model.hidden_size={H}",
                    f"steps={steps}",
                    f"eval_every={steps}",
                    "dataset.val_size=256",
                    "dataset.test_size=256",
                    "logger=none",
                    "progress=false",
                    f"device={device.type}",
                    f"threads={torch.get_num_threads()}",
                    "threads_follow=false",  # timed on the count asked for, whatever the load
                ],
            )
    log(f"  B={B} T={T} H={H}: {reps} rounds x ({', '.join(cfgs)}) of {steps} steps")
    times: dict[str, list[float]] = {n: [] for n in cfgs}
    whole: dict[str, list[float]] = {n: [] for n in cfgs}  # the run's wall time per step, evaluations included
    names = list(cfgs)
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            with tempfile.TemporaryDirectory() as d:
                summary = train(cfgs[name], Path(d))
            times[name].append(summary["time_per_step"] * 1e3)
            whole[name].append(summary["wall_time"] / summary["steps"] * 1e3)
    splits = {name: step_split(cfg, min(steps, 20), device) for name, cfg in cfgs.items()}
    rows = []
    for name, ts in times.items():
        base = "gru" if "gru" in name else "lstm"
        base = base if base in times else name
        st = summarize(ts)
        split, of_base = splits[name], splits[base]
        run_ratio = statistics.median(a / b for a, b in zip(whole[name], whole[base]))
        log(
            f"  {name}: a step {split['step_ms']:.1f} ms = its layer {split['layer_ms']:.1f} "
            f"({split['layer_ms'] / split['step_ms']:.0%}) + optimizer {split['optimizer_ms']:.1f} + the rest "
            f"{split['rest_ms']:.1f}; against {base}'s: layer {split['layer_ms'] / of_base['layer_ms']:.2f}x, "
            f"outside it {(split['step_ms'] - split['layer_ms']) / (of_base['step_ms'] - of_base['layer_ms']):.2f}x, "
            f"step {split['step_ms'] / of_base['step_ms']:.2f}x; the whole run (evaluations, checkpoints) "
            f"{run_ratio:.2f}x"
        )
        rows.append(
            {
                "section": "train",
                "model": name.split("/")[0],
                "impl": "lnbench train" + (f", {name.split('/')[1]}" if "/" in name else ""),
                "batch": B,
                "seq_len": T,
                "hidden": H,
                "input_size": 2,
                "reps": reps,
                **st,
                "samples_per_s": B / (st["ms_median"] / 1e3),
                "mem_mb": None,
                "baseline": f"{base} (lnbench train)",
                "baseline_ms_median": statistics.median(times[base]),
                "ratio": statistics.median(a / b for a, b in zip(ts, times[base])),
                "run_ms_per_step": statistics.median(whole[name]),
                "run_ratio": run_ratio,
                "split": split,
            }
        )
    return rows


# What runs a recurrent layer, forward and backward, as torch's profiler names it: lnbench's C++ kernels and its
# torch-op recurrences (autograd Functions), torch's fused LSTM (oneDNN) and GRU.
LAYER_EVENTS = ("Recurrence", "aten::lstm", "aten::gru", "MkldnnRnnLayerBackward0", "GruBackward", "LstmBackward")


def step_split(cfg, steps: int, device: torch.device) -> dict[str, float]:
    """Where a training step of the run's model, optimizer and batches goes (ms per step, torch.profiler's CPU
    time on the calling thread over `steps` steps after two untimed ones): the recurrent layer (`LAYER_EVENTS`,
    forward and backward), the optimizer (step and zero_grad), and the rest (data, the input and head, the loss,
    autograd's own work)."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415 (only when the train rows run)

    dataset = instantiate(cfg.dataset, _convert_="all")
    seed_everything(cfg.seed)
    model = setup_model(cfg.model, dataset.spec, device, first_batch=dataset.train_batch(0)[0])
    optimizer, scheduler = setup_optimizer(cfg.optim, cfg.schedule, model, device)
    for step in range(2):
        train_step(model, optimizer, scheduler, dataset.spec, dataset.train_batch(step), device, None)
    sync(device)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(2, 2 + steps):
            train_step(model, optimizer, scheduler, dataset.spec, dataset.train_batch(step), device, None)
        sync(device)
    wall = (time.perf_counter() - t0) * 1e3
    shares = {"layer": 0.0, "optimizer": 0.0}
    for e in prof.events():  # each outermost event of a share: its time holds its children's
        if (share := _share(e)) and not any(_share(p) for p in _parents(e)):
            shares[share] += e.cpu_time_total / 1e3
    step_ms, layer, optimizer_ms = wall / steps, shares["layer"] / steps, shares["optimizer"] / steps
    return {
        "step_ms": step_ms,
        "layer_ms": layer,
        "optimizer_ms": optimizer_ms,
        "rest_ms": step_ms - layer - optimizer_ms,
    }


def _share(event) -> Optional[str]:
    if any(k in event.name for k in LAYER_EVENTS):
        return "layer"
    return "optimizer" if event.name.startswith("Optimizer.") else None


def _parents(event):
    while (event := event.cpu_parent) is not None:
        yield event


# The default run's step (model ln_lstm, adding: batch 64, seq_len 50, hidden 128; input 2 features).
def sweep_rows(reps: int, epochs: Optional[float], log) -> list[dict]:
    """fig6_mnist's sweep (8 jobs: model x batch size, one lr and seed) with the joblib launcher against the basic one,
    wall time of the whole `lnbench train -m` command, interleaved. Skipped where MNIST or the joblib launcher is
    missing.

    The jobs train as the preset has them, at equal epochs: a batch-4 job takes 32 times the steps of a
    batch-128 one. `epochs` (None: the preset's own 2) scales all of them alike; a fixed step count for
    every job would time a different sweep, one that the batch-128 jobs dominate. Each run records the
    machine's 1-minute load average after it: with a neighbour on one of 2 cores, joblib's two workers
    share one core and the ratio says more about the neighbour than about the launcher."""
    # One learning rate and one seed: the preset's model x batch size grid, as many jobs as a small sweep has.
    cmd = [
        sys.executable,
        "-m",
        "lnbench.cli",
        "train",
        "-m",
        "+experiment=fig6_mnist",
        "optim.lr=0.001",
        "seed=0",
        "logger=none",
        "progress=false",
    ]
    if epochs is not None:  # the preset's own formulas (2 epochs, 8 evaluations), with `epochs` in place of its 2
        carve = "${oc.select:dataset.carve.0,55000}"
        cmd += [
            f"steps='${{lnbench.epochs:{epochs},${{dataset.batch_size}},{carve}}}'",
            f"eval_every='${{lnbench.epochs:{epochs / 8},${{dataset.batch_size}},{carve}}}'",
        ]
    launchers = {"basic": [], "joblib": ["hydra/launcher=joblib"]}
    walls: dict[str, list[float]] = {k: [] for k in launchers}
    loads: dict[str, list[float]] = {k: [] for k in launchers}
    log(
        f"  fig6_mnist sweep ({'2 epochs, the preset' if epochs is None else f'{epochs} epochs'} per job): "
        f"{reps} x (basic, joblib)"
    )
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
    st = summarize([w * 1e3 for w in walls["joblib"]])
    return [
        {
            "section": "sweep",
            "model": "fig6_mnist (8 jobs)",
            "impl": "joblib launcher",
            "batch": None,
            "seq_len": None,
            "hidden": None,
            "input_size": None,
            "reps": reps,
            **st,
            "samples_per_s": None,
            "mem_mb": None,
            "baseline": "basic launcher",
            "baseline_ms_median": statistics.median(walls["basic"]) * 1e3,
            "ratio": statistics.median(j / b for j, b in zip(walls["joblib"], walls["basic"])),
            "load_avg": loads,
        }
    ]
