"""One training run, top to bottom: config -> dataset, model, optimizer -> steps -> metrics -> summary.

The loop knows neither the model nor the dataset: it asks the dataset for the batch of each step and
the task (lnbench.tasks) for the loss and metrics, and hands every logged value to the Tracker.
"""
from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lnbench import checkpoint, provenance, tasks
from lnbench.config import Schedule, validate
from lnbench.errors import ConfigError, Diverged, Interrupted, refused_while_building
from lnbench.nn.norm import normalizer
from lnbench.sinks import sink_state_from_checkpoint
from lnbench.track import Tracker, end_of_run_block

log = logging.getLogger("lnbench")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} is not allowed here: torch sees no CUDA device. Use device=cpu or device=auto.")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={name} is not allowed here: MPS is not available. Use device=cpu or device=auto.")
    return device


def build_dataset(cfg: DictConfig, **kw):
    with refused_while_building("dataset", cfg.dataset):
        return instantiate(cfg.dataset, _convert_="all", **kw)


def build_model(cfg: DictConfig, spec) -> torch.nn.Module:
    with refused_while_building("model", cfg.model):
        return instantiate(cfg.model, _partial_=True, _convert_="object")(spec=spec)


def build_optimizer(cfg: DictConfig, model: torch.nn.Module, device: torch.device, steps: int):
    kw = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    schedule, warmup = Schedule(kw.pop("schedule")), kw.pop("warmup_steps")
    kw.pop("clip_grad_norm")
    if "fused" in kw and kw["fused"] is None:
        # Fused Adam runs the whole update as one kernel; torch has it for CUDA and CPU floats.
        kw["fused"] = device.type in ("cuda", "cpu")
    with refused_while_building("optim", cfg):
        optimizer = instantiate(kw, _partial_=True)(model.parameters())

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(steps - warmup, 1)
        if schedule is Schedule.cosine:
            return 0.5 * (1 + math.cos(math.pi * progress))
        if schedule is Schedule.linear:
            return max(1.0 - progress, 0.0)
        return 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@torch.no_grad()
def evaluate(model, dataset, split: str, device: torch.device) -> dict[str, float]:
    """Metrics over a whole split, each case (or asked token) weighted equally."""
    was_training = model.training
    model.eval()
    total, count = None, 0
    for x, y in dataset.eval_batches(split):
        _, values, n = tasks.loss_and_metrics(dataset.spec, model(x.to(device)), y.to(device))
        total = values * n if total is None else total + values * n
        count += int(n)
    model.train(was_training)
    means = (total / max(count, 1)).tolist()
    return dict(zip(tasks.metric_names(dataset.spec), means))


def fmt(values: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.4g}" for k, v in values.items())


def train(cfg: DictConfig, run_dir: Path, name: str = "default", group: str | None = None, tags: list[str] = ()) -> dict[str, Any]:
    """Trains in `run_dir`, continuing from its checkpoint if it has one. Returns the summary; raises
    Diverged (after writing the summary) if the loss became NaN or Inf, Interrupted on SIGTERM/SIGINT."""
    validate(cfg)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with checkpoint.RunLock(run_dir):  # one process per run directory
        return train_in(cfg, run_dir, name, group, list(tags))


def train_in(cfg: DictConfig, run_dir: Path, name: str, group: str | None, tags: list[str]) -> dict[str, Any]:
    device = resolve_device(str(cfg.device))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    ckpt = checkpoint.load(run_dir, config)  # None for a new run; a resume may not change the config
    if ckpt is not None and (done := checkpoint.completed_summary(run_dir, ckpt, cfg.steps)):
        log.info("%s already completed its %d steps: nothing to do.", run_dir, cfg.steps)
        return done
    seed_everything(cfg.seed)

    dataset = build_dataset(cfg)
    spec = dataset.spec
    log.info("data: %s", dataset.describe())
    model = build_model(cfg, spec).to(device)
    norm = getattr(model, "norm", None)
    if ckpt is None and norm is not None:
        normalizer(norm.kind).init_from_data(model, dataset.train_batch(0)[0].to(device), norm)
    optimizer, scheduler = build_optimizer(cfg.optim, model, device, cfg.steps)
    clip = cfg.optim.clip_grad_norm  # None: no clipping
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model: %s, %d parameters, device %s", type(model).__name__, n_params, device)

    # The loop's state besides the model: where a checkpoint resumes it (data order follows from the step).
    step, best, val, window, resumed_at = 0, {}, None, [], []
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        checkpoint.restore_rng(ckpt["rng"])
        step, best, val, window = ckpt["step"], ckpt["best"], ckpt["val"], [w.to(device) for w in ckpt["window"]]
        resumed_at = ckpt["resumed_at"] + [step]
        log.info("resuming %s from its checkpoint at step %d", run_dir, step)
    # A resume continues each sink where the checkpoint left it: metrics.jsonl cut to its lines, the same W&B run.
    tracker = Tracker(cfg.logger, run_dir, name=name, group=group, tags=tags, run_config=config, steps=cfg.steps,
                      progress=cfg.progress, resume=sink_state_from_checkpoint(ckpt),
                      elapsed=(ckpt or {}).get("elapsed", 0.0), step=step)

    def save_checkpoint() -> None:
        nonlocal checkpoint_time
        t0 = time.perf_counter()
        checkpoint.save(run_dir, {
            "step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "best": best, "val": val, "window": window,
            "sinks": tracker.state(),
            "elapsed": tracker.elapsed(), "resumed_at": resumed_at, "config": config,
        })
        checkpoint_time += time.perf_counter() - t0

    names = tasks.metric_names(spec)
    primary = tasks.primary_metric(spec)
    summary: dict[str, Any] = {"status": "running", "params": n_params, "device": str(device), "primary_metric": primary, "baseline": spec.baseline,
                               "provenance": provenance.collect(str(device))}
    # time_per_step counts training steps with their logging; evaluations and checkpoints are timed apart.
    start_step, eval_time, checkpoint_time = step, 0.0, 0.0
    # Plain ints: reading a DictConfig costs ~10 us, and the loop reads these every step.
    steps, log_every, eval_every, checkpoint_every = cfg.steps, cfg.log_every, cfg.eval_every, cfg.checkpoint_every

    def seen(step: int) -> dict[str, float]:
        return {"epoch": round(dataset.epoch(step), 4), "samples": step * dataset.batch_size}

    model.train()
    loop_start = time.perf_counter()
    try:
        with checkpoint.StopSignals(run_dir) as stop:  # SIGTERM/SIGINT: checkpoint at the end of the step, then stop
            if ckpt is None:
                save_checkpoint()  # step 0: from here on the run can always be resumed
            while step < steps:
                x, y = dataset.train_batch(step)
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss, values, _ = tasks.loss_and_metrics(spec, model(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if clip:
                    grad_norm = torch.nn.utils.clip_grad_norm_(params, clip)
                optimizer.step()
                scheduler.step()
                window.append(values)
                step += 1
                last = step == steps
                if step % log_every == 0 or last:
                    rows = torch.stack(window).cpu()  # the only host sync of the logging interval
                    window = []
                    bad = (~torch.isfinite(rows[:, 0])).nonzero()
                    if len(bad):
                        summary.update(status="diverged", diverged_at_step=step - len(rows) + int(bad[0, 0]) + 1)
                        log.error("loss is not finite at step %d: stopping (status diverged).", summary["diverged_at_step"])
                        break
                    # The gradient norm of the logging step (before clipping): computing it at every step
                    # would cost a pass over all gradients per step.
                    if not clip:
                        grad_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
                    means = {**dict(zip(names, rows.mean(0).tolist())), "grad_norm": float(grad_norm)}
                    tracker.log("train", step, means, **seen(step), lr=scheduler.get_last_lr()[0])
                    tracker.show(step, fmt({k: means[k] for k in dict.fromkeys(["loss", primary])}), line=False)
                if step % eval_every == 0 or last:
                    t0 = time.perf_counter()
                    val = evaluate(model, dataset, "val", device)
                    eval_time += time.perf_counter() - t0
                    tracker.log("val", step, val, **seen(step))
                    for k, v in val.items():
                        best[k] = min(best.get(k, math.inf), v)
                    tracker.show(step, "val " + fmt(val), line=True)
                if step % checkpoint_every == 0 or last or stop.requested:
                    save_checkpoint()
                if stop.requested:
                    summary.update(status="interrupted")
                    raise Interrupted(stop.requested, step, run_dir)
        if summary["status"] == "running":
            test = evaluate(model, dataset, "test", device)
            tracker.log("test", step, test)
            summary.update(status="completed", test=test, final_val=val, best_val=best)
            for n in cfg.test_seq_lens:  # BN's per-step statistics vs LN on sequences longer than trained on
                at_len = evaluate(model, build_dataset(cfg, eval_seq_len=n), "test", device)
                tracker.log("test", step, at_len, eval_seq_len=n)
                summary.setdefault("test_at_len", {})[str(n)] = at_len
            tracker.close_console()
    except BaseException as e:
        if summary["status"] == "running":
            stopped = isinstance(e, (Interrupted, KeyboardInterrupt))
            summary.update(status="interrupted" if stopped else "failed", error=f"{type(e).__name__}: {e}")
        raise
    finally:
        train_time = time.perf_counter() - loop_start - eval_time - checkpoint_time
        summary.update(steps=step, wall_time=round(tracker.elapsed(), 3), time_per_step=round(train_time / max(step - start_step, 1), 6),
                       eval_time=round(eval_time, 3), checkpoint_time=round(checkpoint_time, 3))
        if resumed_at:
            summary["resumed_at"] = resumed_at
        summary["wandb"] = tracker.where("wandb")  # the W&B run's location (None without W&B), as before
        tracker.finish(summary)
        log.info(end_of_run_block(summary, run_dir, primary))
    if summary["status"] == "diverged":
        raise Diverged(summary["diverged_at_step"], run_dir)
    return summary
