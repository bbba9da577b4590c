"""One training run as a recipe of named steps, as in torchtune's recipes: `setup_data`, `setup_model`,
`setup_optimizer` (each from its own config subtree), `train_step`, `evaluate` and `Recipe.save_checkpoint`;
`Recipe.loop` calls them and decides when to log, evaluate and checkpoint.

The loop knows neither the model nor the dataset: it asks the dataset for the batch of each step and
the task (lnbench.training.tasks) for the loss and metrics, and hands every logged value to the Tracker.
"""

from __future__ import annotations

import logging
import random
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lnbench import phases
from lnbench.config.runtime import Runtime
from lnbench.config.validate import validate
from lnbench.data import cache as data_cache
from lnbench.errors import Diverged, Interrupted, refused_while_building
from lnbench.nn.norm import normalizer
from lnbench.runs import CheckpointKey as Key
from lnbench.runs import RunLock, Summary, write_config
from lnbench.training import checkpoint, free_cores, tasks
from lnbench.training.device import cuda_settings, resolve_device
from lnbench.training.run_record import RunRecord, fmt
from lnbench.training.sinks import sink_state_from_checkpoint
from lnbench.training.tracker import Tracker

log = logging.getLogger("lnbench")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---- the recipe's steps: each takes only its own config subtree ---------------------------------
def setup_data(dataset_cfg: DictConfig, **kw):
    """The dataset (`kw`: e.g. eval_seq_len=N for a test at another length)."""
    with refused_while_building("dataset", dataset_cfg):
        return instantiate(dataset_cfg, _convert_="all", **kw)


def setup_model(
    model_cfg: DictConfig, spec, device: torch.device = torch.device("cpu"), first_batch=None
) -> torch.nn.Module:
    """The model on `device`; with `first_batch` (a new run), its normalizer's data-dependent init too."""
    with refused_while_building("model", model_cfg):
        model = instantiate(model_cfg, _partial_=True, _convert_="object")(spec=spec).to(device)
    norm = getattr(model, "norm", None)
    if first_batch is not None and norm is not None:
        normalizer(norm.kind).init_from_data(model, first_batch.to(device), norm)
    return model


def setup_optimizer(optim_cfg: DictConfig, schedule_cfg: DictConfig, model: torch.nn.Module, device: torch.device):
    """(optimizer, lr scheduler). The scheduler is torch's own: `schedule.main` (a `_partial_` component
    from conf/schedule/), after `schedule.warmup_steps` of LinearLR warmup from lr/warmup to lr, joined
    by SequentialLR. The warmup is built here rather than in YAML: its factors follow from one number."""
    kw = OmegaConf.to_container(optim_cfg, resolve=True, enum_to_str=True)
    if "fused" in kw and kw["fused"] is None:
        # Fused Adam runs the whole update as one kernel; torch has it for CUDA and CPU floats.
        kw["fused"] = device.type in ("cuda", "cpu")
    with refused_while_building("optim", optim_cfg):
        optimizer = instantiate(kw, _partial_=True)(model.parameters())
    with refused_while_building("schedule", schedule_cfg):
        main = instantiate(schedule_cfg.main)(optimizer)
    warmup = int(schedule_cfg.warmup_steps)
    if warmup == 0:
        return optimizer, main
    sched = torch.optim.lr_scheduler
    # (s+1)/warmup at step s
    ramp = sched.LinearLR(optimizer, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1)
    return optimizer, sched.SequentialLR(optimizer, [ramp, main], milestones=[warmup])


def train_step(model, optimizer, scheduler, spec, batch, device: torch.device, clip: float | None):
    """One optimizer step on `batch`: (the metrics as a tensor on the device, the gradient norm before
    clipping or None when not clipping, which would cost a pass over the gradients at every step)."""
    x, y = (t.to(device, non_blocking=True) for t in batch)
    loss, values, _ = tasks.loss_and_metrics(spec, model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip) if clip else None
    optimizer.step()
    scheduler.step()
    return values, grad_norm


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


def gradient_norm(model) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]))


UNREAD = "unread"  # train(ckpt=UNREAD): the run reads its own checkpoint


def train(
    cfg: DictConfig,
    run_dir: Path,
    name: str = "default",
    group: str | None = None,
    tags: list[str] = (),
    *,
    runtime: Runtime | None = None,
    ckpt: dict[str, Any] | None | str = UNREAD,
    locked: bool = False,
) -> dict[str, Any]:
    """Trains in `run_dir`, continuing from its checkpoint if it has one. Returns the summary; raises Diverged
    (after writing the summary) if the loss became NaN or Inf, Interrupted on SIGTERM/SIGINT. A launcher
    (lnbench.launch.entry) says what it has done: `locked`, validated `cfg` and locked `run_dir`; `ckpt`, read the
    checkpoint (None: there is none); `runtime`, decided the threads, heap and follow policy (a record, never
    written into the config; by default the config's own: Runtime.configured)."""
    run_dir = Path(run_dir)
    if not locked:
        validate(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
    with nullcontext() if locked else RunLock(run_dir):  # one process per run directory
        timer, start = phases.Timer.from_env(run_dir), time.perf_counter()
        device = resolve_device(str(cfg.device))
        cuda_settings(device)
        config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        if ckpt is UNREAD:
            ckpt = checkpoint.load(run_dir, config)  # None for a new run; a resume may not change the config
        runtime = checkpoint.runtime_in_effect(runtime or Runtime.configured(cfg), ckpt)
        if ckpt is not None and (done := checkpoint.completed_summary(run_dir, ckpt, cfg.steps)):
            log.info("%s already completed its %d steps: nothing to do.", run_dir, cfg.steps)
            return done
        seed_everything(cfg.seed)
        write_config(run_dir, config)
        timer.add(phases.RUN_SETUP, time.perf_counter() - start)
        return Recipe(cfg, run_dir, device, config, ckpt, runtime, timer).run(name, group, list(tags))


class Recipe(RunRecord):
    """A run's parts (dataset, model, optimizer, scheduler, tracker) and the loop's state besides the
    model, which is what a checkpoint holds: the data order follows from the step (lnbench.data.base)."""

    draws_progress = True  # a progress bar where cfg.progress asks for one

    def __init__(
        self,
        cfg: DictConfig,
        run_dir: Path,
        device: torch.device,
        config: dict[str, Any],
        ckpt: dict[str, Any] | None,
        runtime: Runtime,
        timer: phases.Timer,
    ):
        self.cfg, self.run_dir, self.device, self.config = cfg, run_dir, device, config
        self.runtime, self.timer = runtime, timer
        with timer.phase(phases.RUN_DATA):
            kept = data_cache.kept(cfg.dataset, runtime.threads)  # made by the job's process before it forked
            self.dataset = setup_data(cfg.dataset) if kept is None else kept
        self.spec = self.dataset.spec
        log.info("data: %s", self.dataset.describe())
        with timer.phase(phases.RUN_MODEL):
            self.model = setup_model(
                cfg.model, self.spec, device, first_batch=None if ckpt else self.dataset.train_batch(0)[0]
            )
        with timer.phase(phases.RUN_OPTIMIZER):
            self.optimizer, self.scheduler = setup_optimizer(cfg.optim, cfg.schedule, self.model, device)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        log.info("model: %s, %d parameters, device %s", type(self.model).__name__, self.n_params, device)
        self.step, self.best, self.val, self.window, self.resumed_at = 0, {}, None, [], []
        self.follow = None  # the thread count's follower, where run() makes one (threads_follow)
        if ckpt is not None:
            self.load_checkpoint(ckpt)
        # What the sinks resume from: metrics.jsonl cut to the checkpoint's lines, the same W&B run, ...
        self.sinks_resume, self.elapsed_before = sink_state_from_checkpoint(ckpt), (ckpt or {}).get(Key.ELAPSED, 0.0)

    # ---- checkpoints (a packed replica's kernels and model state: lnbench.training.replicas) ----
    def kernel_paths(self):
        """What runs the model's recurrence (lnbench.nn.fast.kernel_path.KernelPath, one per layer; its rounding
        differs in the last bits), or None for a model without one."""
        return getattr(self.model, "kernel_paths", None)

    def kernels(self) -> str | None:
        """kernel_paths as the checkpoint names them."""
        paths = self.kernel_paths()
        return None if paths is None else ", ".join(map(str, paths))

    def model_state(self) -> dict[str, Any]:
        return self.model.state_dict()

    def load_checkpoint(self, ckpt: dict[str, Any]) -> None:
        self.model.load_state_dict(ckpt[Key.MODEL])
        self.optimizer.load_state_dict(ckpt[Key.OPTIMIZER])
        self.scheduler.load_state_dict(ckpt[Key.SCHEDULER])
        checkpoint.restore_rng(ckpt[Key.RNG])
        self.step, self.best, self.val = ckpt[Key.STEP], ckpt[Key.BEST], ckpt[Key.VAL]
        self.window = [w.to(self.device) for w in ckpt[Key.WINDOW]]
        self.resumed_at = ckpt[Key.RESUMED_AT] + [self.step]
        log.info("resuming %s from its checkpoint at step %d", self.run_dir, self.step)
        began, now = ckpt.get(Key.KERNELS), self.kernels()
        if began and began != now:
            log.warning(
                "this run began on %s and continues on %s: from here its numbers differ in the last bits "
                "from an uninterrupted run's",
                began,
                now,
            )

    def save_checkpoint(self) -> None:
        with self.timer.phase(phases.CHECKPOINTS):
            # fmt: off
            checkpoint.save(self.run_dir, {
                Key.STEP: self.step, Key.MODEL: self.model_state(), Key.OPTIMIZER: self.optimizer.state_dict(),
                Key.SCHEDULER: self.scheduler.state_dict(), Key.BEST: self.best, Key.VAL: self.val,
                Key.WINDOW: self.window, Key.SINKS: self.tracker.state(), Key.ELAPSED: self.tracker.elapsed(),
                Key.RESUMED_AT: self.resumed_at, Key.CONFIG: self.config,
                Key.KERNELS: self.kernels(), Key.THREADS: self.runtime.threads,
            })
            # fmt: on

    # ---- what the loop logs ----
    def seen(self) -> dict[str, float]:
        return {"epoch": round(self.dataset.epoch(self.step), 4), "samples": self.step * self.dataset.batch_size}

    def log_train(self, grad_norm) -> int | None:
        """Logs the mean of the steps since the last log; returns the first step whose loss was not finite."""
        rows = torch.stack(self.window).cpu()  # the only host sync of the logging interval
        self.window = []
        bad = (~torch.isfinite(rows[:, 0])).nonzero()
        if len(bad):
            return self.step - len(rows) + int(bad[0, 0]) + 1
        # The gradient norm of the logging step (before clipping).
        grad_norm = gradient_norm(self.model) if grad_norm is None else grad_norm
        means = {**dict(zip(tasks.metric_names(self.spec), rows.mean(0).tolist())), "grad_norm": float(grad_norm)}
        self.tracker.log("train", self.step, means, **self.seen(), lr=self.scheduler.get_last_lr()[0])
        shown = dict.fromkeys(["loss", tasks.primary_metric(self.spec)])
        self.tracker.show(self.step, fmt({k: means[k] for k in shown}), line=False)
        return None

    def validate_now(self) -> None:
        with self.timer.phase(phases.EVAL_VAL):
            values = evaluate(self.model, self.dataset, "val", self.device)
        self.record_val(values)

    def test(self, summary: Summary) -> None:
        with self.timer.phase(phases.EVAL_TEST):
            test = evaluate(self.model, self.dataset, "test", self.device)
            at_len = {  # BN's per-step statistics vs LN on sequences longer than trained on
                n: evaluate(self.model, setup_data(self.cfg.dataset, eval_seq_len=n), "test", self.device)
                for n in self.cfg.test_seq_lens
            }
        self.record_test(summary, test, at_len)

    # ---- the loop ----
    def loop(self, summary: Summary, stop) -> None:
        # Plain values: reading a DictConfig costs ~10 us, and the loop reads these every step.
        cfg = self.cfg
        steps, log_every, eval_every = cfg.steps, cfg.log_every, cfg.eval_every
        checkpoint_every, clip = cfg.checkpoint_every, cfg.clip_grad_norm
        parts = (self.model, self.optimizer, self.scheduler, self.spec)
        # The thread count follows the free cores during the steps only (threads_follow), and is back at the
        # run's own count whichever way the loop ends.
        with self.follow.following() if self.follow else nullcontext(lambda step: None) as follow:
            while self.step < steps:
                values, grad_norm = train_step(*parts, self.dataset.train_batch(self.step), self.device, clip)
                self.window.append(values)
                self.step += 1
                follow(self.step)
                self.tracker.tick(self.step)
                last = self.step == steps
                if self.step % log_every == 0 or last:
                    if (bad_step := self.log_train(grad_norm)) is not None:
                        self.record_diverged(summary, bad_step)
                        return
                if self.step % eval_every == 0 or last:
                    with self.follow.at_base() if self.follow else nullcontext():
                        self.validate_now()
                if self.step % checkpoint_every == 0 or last or stop.requested:
                    self.save_checkpoint()
                if stop.requested:
                    summary.status = "interrupted"
                    raise Interrupted(stop.requested, self.step, self.run_dir)

    def start_tracker(self, name: str, group: str | None, tags: list[str]) -> Tracker:
        cfg = self.cfg
        return Tracker(
            cfg.logger,
            self.run_dir,
            name=name,
            group=group,
            tags=tags,
            run_config=self.config,
            steps=cfg.steps,
            progress=cfg.progress and self.draws_progress,
            resume=self.sinks_resume,
            elapsed=self.elapsed_before,
            step=self.step,
        )

    def run(self, name: str, group: str | None, tags: list[str]) -> dict[str, Any]:
        timer = self.timer
        with timer.phase(phases.RUN_TRACKER):
            self.tracker = self.start_tracker(name, group, tags)
        batch = lambda: [t.to(self.device) for t in self.dataset.train_batch(self.step)]  # noqa: E731
        self.follow, follows = free_cores.follower(self.cfg, self.runtime, self.model, self.spec, batch)
        summary = self.open_summary(follows)
        start_step, loop_start = self.step, time.perf_counter()
        self.model.train()
        try:
            # SIGTERM/SIGINT: checkpoint at the end of the step, then stop
            with checkpoint.StopSignals(self.run_dir) as stop:
                if not self.resumed_at:
                    self.save_checkpoint()  # step 0: from here on the run can always be resumed
                self.loop(summary, stop)
            if summary.status == "running":
                self.test(summary)
                self.tracker.close_console()  # the log lines below go under the finished bar, not over it
        except BaseException as e:
            self.ended_by(summary, e)
            raise
        finally:
            # time_per_step counts training steps with their logging; val evaluations and checkpoints are timed apart
            # (the test's evaluation is not: it counts in time_per_step, as it always has).
            train_time = (
                time.perf_counter() - loop_start - timer.seconds[phases.EVAL_VAL] - timer.seconds[phases.CHECKPOINTS]
            )
            timer.add(phases.TRAINING_STEPS, train_time - timer.seconds[phases.EVAL_TEST])
            end_start = time.perf_counter()
            self.close_summary(summary, train_time, start_step)
            timer.add(phases.RUN_END, time.perf_counter() - end_start)
        if summary.status == "diverged":
            raise Diverged(summary.diverged_at_step, self.run_dir)
        return summary.as_dict()
