"""Packed replicas against solo runs on one device (issue 41, item 3): training steps per second of K replicas in one
pack (lnbench.training.replicas.train_step) against one solo run's steps (lnbench.training.recipe.train_step), and
the jobs per hour each gives at the preset's step count.

    python scripts/gpu/packed_bench.py [OUT_DIR] [--json FILE] [--device auto] [--budget 45] [--ks 1,4,16,64]

Workloads, at their presets' shapes (composed from conf/, logger=none, no network, no files but a temp folder), in
this order (the budget may cut the last):
  mlp_b4  fig6_mnist's ln_mlp, 784-1000-1000-10, at batch 4 (MNIST-shaped random images: no data files needed);
          its 4,000-step cells are most of fig6's check time
  lstm    ln_gain_init's LN-LSTM, hidden 128, adding problem at seq_len 50, batch 64
  mlp     fig6's ln_mlp at batch 128
A check's tuning sweep packs 9 jobs per line (3 learning rates x 3 seeds); its judging rounds add seeds.
Each pack's replicas differ in seed and learning rate, as a check's tuning sweep. On the MLP the forward and backward
of the pack (vmap over stacked parameters) are also timed against a hand-batched MLP (bmm per layer, no optimizer).
Steps only: evaluation, checkpoints and start-up are not timed (jobs/hour = 3600 / (steps x time per job's step)).
Prints a table and writes OUT_DIR/packed_bench.json (or FILE) after every measurement (a killed run leaves what it
measured). scripts/gpu/run.sh calls it as `packed_bench.py --json FILE` with a 60 s cap: the default budget leaves
room for Python's and CUDA's start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hydra import compose as hydra_compose  # noqa: E402
from hydra import initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from lnbench.config.schema import register_configs  # noqa: E402
from lnbench.launch.entry import CONF_DIR  # noqa: E402
from lnbench.training import recipe  # noqa: E402
from lnbench.training.replicas import PackJob, Replica, make_pack  # noqa: E402
from lnbench.training.replicas import train_step as packed_train_step  # noqa: E402

WORKLOADS = {
    # name: (overrides, steps of one job at the preset's size)
    "mlp": (["+experiment=fig6_mnist", "model=ln_mlp", "dataset.batch_size=128"], 124),
    "mlp_b4": (["+experiment=fig6_mnist", "model=ln_mlp", "dataset.batch_size=4"], 4000),
    "lstm": (["+experiment=ln_gain_init"], 300),
}
LRS = (1e-3, 3e-3, 1e-2)


def fake_mnist(folder: Path) -> Path:
    """MNIST's t10k files in IDX layout, random pixels and labels: the shapes and the dataset code of a real run."""
    raw = folder / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (10000, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 10000, dtype=np.uint8)
    (raw / "t10k-images-idx3-ubyte").write_bytes(np.array([0x803, 10000, 28, 28], ">u4").tobytes() + images.tobytes())
    (raw / "t10k-labels-idx1-ubyte").write_bytes(np.array([0x801, 10000], ">u4").tobytes() + labels.tobytes())
    return folder


def compose(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose("train", overrides=overrides)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, min_steps: int, min_s: float, warm: int = 2) -> float:
    """Seconds per call of fn, after `warm` calls, over at least min_steps calls and min_s seconds."""
    for _ in range(warm):
        fn()
    sync(device)
    n, t0 = 0, time.perf_counter()
    while n < min_steps or time.perf_counter() - t0 < min_s:
        fn()
        n += 1
        if n % 4 == 0:
            sync(device)
    sync(device)
    return (time.perf_counter() - t0) / n


def configs(workload: str, k: int, device: str, data: Path):
    overrides, _ = WORKLOADS[workload]
    base = [*overrides, "logger=none", f"device={device}", "progress=false", f"dataset.data_dir={data}"]
    if "lstm" in workload:
        base.remove(f"dataset.data_dir={data}")
    return [compose([*base, f"seed={i}", f"optim.lr={LRS[i % len(LRS)]}"]) for i in range(k)]


def solo_step_s(cfg, device: torch.device, folder: Path, min_s: float) -> float:
    recipe.seed_everything(cfg.seed)
    r = recipe.Recipe(cfg, folder, device, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), None)
    state = {"step": 0}

    def step():
        recipe.train_step(r.model, r.optimizer, r.scheduler, r.spec, r.dataset.train_batch(state["step"]), device, None)
        state["step"] += 1

    return timed(step, device, 5, min_s)


def packed_step_s(cfgs, device: torch.device, folder: Path, min_s: float) -> dict[str, float]:
    replicas = [
        Replica(PackJob(c, folder / str(i)), device, OmegaConf.to_container(c, resolve=True, enum_to_str=True), None)
        for i, c in enumerate(cfgs)
    ]
    pack = make_pack(replicas, device)
    state = {"step": 0}

    def step():
        packed_train_step(pack, replicas, state["step"])
        state["step"] += 1
        for r in replicas:
            r.window.clear()

    def forward_backward():
        pack.forward_backward([r.dataset.train_batch(state["step"]) for r in replicas])

    def data():
        for r in replicas:
            r.dataset.train_batch(state["step"])

    out = {"step_s": timed(step, device, 5, min_s), "forward_backward_s": timed(forward_backward, device, 3, min_s / 2)}
    out["optimizer_s"] = max(out["step_s"] - out["forward_backward_s"], 0.0)  # clipping, optimizers, schedulers
    out["data_s"] = timed(data, device, 3, min_s / 4, warm=1)  # the K batches made on the CPU (in forward_backward)
    return out


def hand_batched_s(k: int, batch: int, device: torch.device, min_s: float) -> float:
    """The forward and backward of K LN-MLPs 784-1000-1000-10 written with bmm (no vmap), for comparison."""
    F = torch.nn.functional
    g = torch.Generator(device="cpu").manual_seed(0)
    sizes = [(784, 1000), (1000, 1000), (1000, 10)]
    W = [(torch.randn(k, i, o, generator=g) / i**0.5).to(device).requires_grad_() for i, o in sizes]
    b = [torch.zeros(k, 1, o, device=device, requires_grad=True) for _, o in sizes]
    gain = [torch.ones(k, 1, 1000, device=device, requires_grad=True) for _ in range(2)]
    x = torch.randn(k, batch, 784, device=device)
    y = torch.randint(0, 10, (k, batch), device=device)

    def fwd_bwd():
        h = x
        for i in range(2):
            a = torch.baddbmm(b[i], h, W[i])
            mu, var = a.mean(-1, keepdim=True), a.var(-1, unbiased=False, keepdim=True)
            h = torch.relu((a - mu) * torch.rsqrt(var + 1e-5) * gain[i])
        out = torch.baddbmm(b[2], h, W[2])
        F.cross_entropy(out.reshape(-1, 10), y.reshape(-1), reduction="none").view(k, batch).mean(1).sum().backward()

    return timed(fwd_bwd, device, 3, min_s / 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, nargs="?", default=Path("."), help="folder for packed_bench.json")
    ap.add_argument("--json", type=Path, default=None, help="the JSON file to write instead")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--budget", type=float, default=45.0, help="seconds; later measurements are skipped past it")
    ap.add_argument("--ks", default="1,4,16,64")
    ap.add_argument("--workloads", default="mlp_b4,lstm,mlp")
    ap.add_argument("--min-s", type=float, default=0.5, help="seconds each timing runs for at least")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    device = recipe.resolve_device(args.device)
    json_file = args.json or args.out / "packed_bench.json"
    json_file.parent.mkdir(parents=True, exist_ok=True)
    ks = [int(k) for k in args.ks.split(",")]
    result = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "load_at_start": os.getloadavg()[0],
        "budget_s": args.budget,
        "rows": [],
    }

    def save() -> None:
        result["elapsed_s"] = round(time.perf_counter() - start, 1)
        json_file.write_text(json.dumps(result, indent=1))

    def left() -> float:
        return args.budget - (time.perf_counter() - start)

    with tempfile.TemporaryDirectory() as tmp:
        data = fake_mnist(Path(tmp) / "data")
        for workload in args.workloads.split(","):
            steps = WORKLOADS[workload][1]
            if left() < 5:
                result["rows"].append({"workload": workload, "skipped": "budget"})
                continue
            solo = solo_step_s(
                configs(workload, 1, str(device), data)[0], device, Path(tmp) / workload / "solo", args.min_s
            )
            for k in ks:
                row = {"workload": workload, "K": k, "solo_step_s": solo, "job_steps": steps}
                # the pack's set-up (K datasets and models) and its timings: ~3 s + K x 0.05 s, roughly
                if left() < 3 + 0.05 * k + 3 * args.min_s:
                    row["skipped"] = "budget"
                    result["rows"].append(row)
                    continue
                try:
                    cfgs = configs(workload, k, str(device), data)
                    row.update(packed_step_s(cfgs, device, Path(tmp) / workload / f"k{k}", args.min_s))
                    if workload.startswith("mlp"):
                        row["hand_batched_forward_backward_s"] = hand_batched_s(
                            k, cfgs[0].dataset.batch_size, device, args.min_s
                        )
                except torch.OutOfMemoryError as e:
                    row["error"] = f"out of memory: {str(e)[:200]}"
                if "step_s" in row:
                    row["speedup"] = solo * k / row["step_s"]  # replica-steps per second, packed / solo
                    row["jobs_per_hour_solo"] = 3600 / (steps * solo)
                    row["jobs_per_hour_packed"] = 3600 * k / (steps * row["step_s"])
                result["rows"].append(row)
                save()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    save()
    print(table(result))
    return 0


def table(result: dict) -> str:
    lines = [
        f"packed replicas on {result['device']} ({result['device_name']}), torch {result['torch']}, "
        f"{result['threads']} threads, load {result['load_at_start']:.1f} at start, {result.get('elapsed_s')} s",
        f"{'workload':8} {'K':>3} {'solo ms':>8} {'pack ms':>8} {'fwd/bwd':>8} {'data':>7} {'optim':>7} "
        f"{'hand f/b':>8} {'speedup':>8} {'jobs/h solo':>11} {'jobs/h pack':>11}",
    ]
    for r in result["rows"]:
        if "step_s" not in r:
            lines.append(f"{r['workload']:8} {r.get('K', ''):>3} {r.get('skipped') or r.get('error', '')}")
            continue
        hand = r.get("hand_batched_forward_backward_s")
        lines.append(
            f"{r['workload']:8} {r['K']:>3} {r['solo_step_s'] * 1e3:8.2f} {r['step_s'] * 1e3:8.2f} "
            f"{r['forward_backward_s'] * 1e3:8.2f} {r['data_s'] * 1e3:7.2f} {r['optimizer_s'] * 1e3:7.2f} "
            f"{'' if hand is None else f'{hand * 1e3:8.2f}':>8} {r['speedup']:7.2f}x "
            f"{r['jobs_per_hour_solo']:11.0f} {r['jobs_per_hour_packed']:11.0f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
