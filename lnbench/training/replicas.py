"""Packed replicas: the runs of one sweep that differ only in their seed or optimizer scalars, trained as K
replicas of one model in one process (lnbench.training.pack stacks them), each writing its own ordinary run
directory: .hydra (the launcher's), config.yaml, metrics.jsonl, summary.json, train.log and a checkpoint a solo
run can resume, so that `lnbench report`, `check`, `status` and resume see ordinary runs.

Each replica is a Recipe (lnbench.training.recipe) built as a solo run builds it, seeded by its own seed, so its
initial weights, its data order (a pure function of (seed, step)) and its optimizer's arithmetic are a solo
run's; its own learning rate, weight decay, gradient clipping and schedule are its own optimizer's. A replica
whose loss turns non-finite stops alone (summary `diverged`, as a solo run's), the others go on. On a GPU a
pack fills the device that one small run leaves idle; on a CPU it was measured slower than K separate runs
(docs/performance.md), so nothing packs unless asked (the sweep's launcher: lnbench.launch.sweep.pack).
"""

from __future__ import annotations

import logging
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from lnbench import phases
from lnbench.config.runtime import Runtime
from lnbench.errors import Diverged, Interrupted, UserError
from lnbench.nn.fast.kernel_path import KernelPath
from lnbench.runs import TRAIN_LOG, write_config
from lnbench.runs import CheckpointKey as Key
from lnbench.training import checkpoint, tasks
from lnbench.training.device import cuda_settings, resolve_device
from lnbench.training.pack import NotPackable, Pack, check_packable, hyperparameters, shared_optimizer
from lnbench.training.recipe import Recipe, evaluate, seed_everything, setup_data

log = logging.getLogger("lnbench")
KERNELS = "packed replicas: torch ops under vmap"  # the checkpoint's and provenance's `kernels` of a replica


@dataclass
class PackJob:
    """One run of a pack: its config, its directory (locked by the caller), and what a W&B user sees it as."""

    cfg: DictConfig
    run_dir: Path
    name: str = "default"
    group: str | None = None
    tags: list[str] = field(default_factory=list)


class Replica(Recipe):
    """One run of a pack: a Recipe built as a solo run's (seed, data, model, optimizer, checkpoint), whose steps
    the pack takes (`train_pack`); its model's tensors are views into the pack's stacked ones."""

    draws_progress = False  # K bars would draw over each other

    def __init__(
        self, job: PackJob, device: torch.device, config: dict[str, Any], ckpt: dict[str, Any] | None, runtime: Runtime
    ):
        self.job, self.outcome = job, None
        Path(job.run_dir).mkdir(parents=True, exist_ok=True)
        self.log_file = logging.FileHandler(Path(job.run_dir) / TRAIN_LOG)
        self.log_file.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        seed_everything(job.cfg.seed)
        write_config(job.run_dir, config)
        with self.speaking():
            run_dir = Path(job.run_dir)
            super().__init__(job.cfg, run_dir, device, config, ckpt, runtime, phases.Timer.from_env(run_dir))
        # A solo run draws nothing from the global generators after this point (a pack refuses models that
        # would, lnbench.training.pack): its checkpoints hold this state, so a replica's are a solo run's.
        self.rng = checkpoint.rng_state()

    def kernel_paths(self) -> list[KernelPath]:
        """As the checkpoint and provenance name it: torch's ops on the CPU split their sums by thread; on a GPU no
        CPU thread computes a number of it."""
        return [KernelPath(KERNELS, "", self.device.type != "cpu")]

    def model_state(self) -> dict[str, Any]:
        return {k: v.clone() for k, v in self.model.state_dict().items()}  # a view would save the whole stack

    def save_checkpoint(self) -> None:
        now = checkpoint.rng_state()
        checkpoint.restore_rng(self.rng)
        try:
            super().save_checkpoint()
        finally:
            checkpoint.restore_rng(now)

    @contextmanager
    def speaking(self):
        """The lnbench log's lines for the block go to this run's train.log too, prefixed with its directory."""
        prefix = f"[{Path(self.job.run_dir).name}] "

        def tag(record: logging.LogRecord) -> bool:
            record.msg = prefix + str(record.msg) if not str(record.msg).startswith(prefix) else record.msg
            return True

        log.addFilter(tag)
        log.addHandler(self.log_file)
        try:
            yield
        finally:
            log.removeHandler(self.log_file)
            log.removeFilter(tag)

    # ---- what Recipe.run does before, at the end of and after its loop ----
    def begin(self, size: int) -> None:
        self.tracker = self.start_tracker(self.job.name, self.job.group, list(self.job.tags))
        # a pack's replicas share one process and its count (torch's ops under vmap split their sums by thread)
        self.summary = self.open_summary("fixed (packed replicas share one process and its thread count)")
        self.summary.extra["packed"] = size  # trained as one of this many replicas (time_per_step is the pack's)
        self.start_step = self.step
        self.model.train()
        if not self.resumed_at:
            self.save_checkpoint()  # step 0: from here on the run can always be resumed

    def validated(self, values: dict[str, float], seconds: float) -> None:
        """Recipe.validate_now, with the pack's evaluation of this replica."""
        self.timer.add(phases.EVAL_VAL, seconds)  # the pack's evaluation, this replica's among them
        self.record_val(values)

    def tested(self, test: dict[str, float], at_len: dict[int, dict[str, float]], seconds: float) -> None:
        """Recipe.test, with the pack's evaluations of this replica."""
        self.timer.add(phases.EVAL_TEST, seconds)
        self.record_test(self.summary, test, at_len)
        self.tracker.close_console()

    def finish(self, loop_seconds: float, shared_seconds: float, error: BaseException | None = None) -> None:
        """Recipe.run's end: the summary and the end block; `outcome` is what a solo run would return or raise.
        loop_seconds: the pack's loop; shared_seconds: its evaluations and every replica's checkpoints."""
        summary = self.summary
        if error is not None:
            self.ended_by(summary, error)
        with self.speaking():
            self.close_summary(summary, loop_seconds - shared_seconds, self.start_step)
        self.log_file.close()
        if summary.status == "diverged":
            self.outcome = ("raised", Diverged(summary.diverged_at_step, self.run_dir))
        elif error is not None:
            self.outcome = ("raised", error)
        else:
            self.outcome = ("returned", summary.as_dict())


def train_pack(jobs: list[PackJob], runtime: Runtime | None = None) -> list[tuple[str, Any]]:
    """Trains the runs of `jobs` (their directories locked by the caller) as replicas of one pack. Returns each
    job's outcome, in order: ("returned", its summary), ("raised", what a solo run would have raised: Diverged,
    Interrupted, a UserError, a bug), or ("solo", why it must train alone: its model cannot run under vmap).
    Runs whose checkpoints stand at different steps (a pack killed between two of its checkpoints) train as one
    pack per step."""
    configs = [OmegaConf.to_container(j.cfg, resolve=True, enum_to_str=True) for j in jobs]
    check_packable(configs, [Path(j.run_dir) for j in jobs])
    device = resolve_device(str(jobs[0].cfg.device))
    cuda_settings(device)  # as a solo run on CUDA computes (lnbench.training.device)
    outcomes: list[tuple[str, Any] | None] = [None] * len(jobs)
    ckpts: dict[int, dict[str, Any] | None] = {}
    for i, (job, config) in enumerate(zip(jobs, configs)):
        try:
            ckpts[i] = ckpt = checkpoint.load(Path(job.run_dir), config)
        except UserError as e:
            outcomes[i] = ("raised", e)
            continue
        if ckpt is not None and (done := checkpoint.completed_summary(Path(job.run_dir), ckpt, job.cfg.steps)):
            outcomes[i] = ("returned", done)
            del ckpts[i]
    # the launcher's runtime (else the first job's config's), as the recipe takes it; a resume keeps its own count
    resumed = next((c for c in ckpts.values() if c is not None), None)
    runtime = checkpoint.runtime_in_effect(runtime or Runtime.configured(jobs[0].cfg), resumed)
    at_step: dict[int, list[int]] = {}
    for i, ckpt in ckpts.items():
        at_step.setdefault(0 if ckpt is None else ckpt[Key.STEP], []).append(i)
    stopped = None
    for members in at_step.values():
        if stopped is not None:
            for i in members:
                outcomes[i] = ("returned", {"status": "not started"})
            continue
        replicas = [Replica(jobs[i], device, configs[i], ckpts[i], runtime) for i in members]
        try:
            train_replicas(replicas, device)
        except NotPackable as e:
            for i in members:
                outcomes[i] = ("solo", str(e))
            continue
        except Interrupted as e:
            stopped = e
        except Exception as e:  # noqa: BLE001 - a bug: every replica still training ended with it (finish)
            for i, r in zip(members, replicas):
                outcomes[i] = r.outcome or ("raised", e)
            continue
        for i, r in zip(members, replicas):
            outcomes[i] = r.outcome
    return [o if o is not None else ("solo", "not reached") for o in outcomes]


def train_replicas(replicas: list[Replica], device: torch.device) -> None:
    """The pack's loop: Recipe.loop's for all replicas at once. Each replica's `outcome` is set at its end."""
    pack = make_pack(replicas, device)
    pack.probe([r.dataset.few_cases(2) for r in replicas])  # NotPackable: nothing written beyond config.yaml yet
    for r in replicas:
        with r.speaking():
            r.begin(len(replicas))
    log.info("packed %d replicas of %s on %s", len(replicas), type(pack.base).__name__, device)
    cfg = replicas[0].cfg
    steps, log_every, eval_every = cfg.steps, cfg.log_every, cfg.eval_every
    active, step, loop_start, shared = list(replicas), replicas[0].step, time.perf_counter(), 0.0
    try:
        with checkpoint.StopSignals(replicas[0].run_dir) as stop:
            while step < steps and active:
                norms = train_step(pack, active, step)
                step += 1
                active[0].tracker.tick(step)  # one pace line for the pack, not K
                last = step == steps
                if step % log_every == 0 or last:
                    gone = []
                    for r, grad_norm in zip(active, norms):
                        with r.speaking():
                            if (bad := r.log_train(grad_norm)) is not None:
                                r.record_diverged(r.summary, bad)
                                gone.append(r)
                    if gone:
                        active = [r for r in active if r not in gone]
                        for r in gone:
                            r.finish(time.perf_counter() - loop_start, shared)
                        if active:
                            stack(pack, active)
                if active and (step % eval_every == 0 or last):
                    t0 = time.perf_counter()
                    results = evaluate_replicas(pack, active, "val")
                    seconds = time.perf_counter() - t0
                    shared += seconds
                    for r, values_r in zip(active, results):
                        with r.speaking():
                            r.validated(values_r, seconds)
                t0 = time.perf_counter()
                for r in active:
                    if step % r.cfg.checkpoint_every == 0 or last or stop.requested:
                        r.save_checkpoint()
                shared += time.perf_counter() - t0
                if stop.requested:
                    raise Interrupted(stop.requested, step, replicas[0].run_dir)
        if active:
            test_replicas(pack, active)
    except BaseException as e:
        for r in active:
            r.finish(
                time.perf_counter() - loop_start,
                shared,
                Interrupted(e.signum, r.step, r.run_dir) if isinstance(e, Interrupted) else e,
            )
        raise
    for r in active:
        r.finish(time.perf_counter() - loop_start, shared)


def train_step(pack: Pack, active: list[Replica], step: int) -> list[torch.Tensor | None]:
    """One step of every replica in `active` (recipe.train_step's, batched): its batch of `step`, forward and
    backward in the pack, then its own clipping, optimizer and scheduler. Returns the gradient norms (None where
    a replica does not clip), each replica's metrics appended to its window."""
    values = pack.forward_backward([r.dataset.train_batch(step) for r in active])
    norms = []
    for r in active:
        clip = r.cfg.clip_grad_norm
        norms.append(torch.nn.utils.clip_grad_norm_(r.model.parameters(), clip) if clip else None)
    if pack.optimizer is not None:  # one optimizer for all, at the hyperparameters their schedulers set
        pack.optimizer.param_groups[0].update(hyperparameters(active[0].optimizer))
        pack.optimizer.step()
    for k, r in enumerate(active):
        if pack.optimizer is None:
            r.optimizer.step()
            r.scheduler.step()
        else:  # its optimizer only carries the hyperparameters: torch would warn that it never stepped
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
                r.scheduler.step()
        r.window.append(values[k])
        r.step += 1
    return norms


def make_pack(replicas: list[Replica], device: torch.device) -> Pack:
    pack = Pack([r.model for r in replicas], replicas[0].spec, device)
    pack.optimizer = shared_optimizer([r.optimizer for r in replicas])
    return pack


def stack(pack: Pack, active: list[Replica]) -> None:
    """The pack's tensors for the replicas in `active`, and one optimizer for them where it computes what theirs
    would (lnbench.training.pack.shared_optimizer)."""
    pack.restack([r.model for r in active])
    pack.optimizer = shared_optimizer([r.optimizer for r in active])


def evaluate_replicas(pack: Pack, active: list[Replica], split: str, datasets=None) -> list[dict[str, float]]:
    """Each replica's metrics over its own `split`, in one batched pass; each alone where their splits differ in
    shape (recipe.evaluate on its own model, whose tensors are its slices of the pack's)."""
    datasets = datasets or [r.dataset for r in active]
    means = pack.evaluate([d.eval_batches(split) for d in datasets])
    if means is None:
        return [evaluate(r.model, d, split, r.device) for r, d in zip(active, datasets)]
    names = tasks.metric_names(active[0].spec)
    return [dict(zip(names, m)) for m in means]


def test_replicas(pack: Pack, active: list[Replica]) -> None:
    t0 = time.time()
    tests = evaluate_replicas(pack, active, "test")
    at_len: list[dict[int, dict[str, float]]] = [{} for _ in active]
    for n in active[0].cfg.test_seq_lens:  # BN's per-step statistics vs LN on longer sequences
        longer = [setup_data(r.cfg.dataset, eval_seq_len=n) for r in active]
        for held, values in zip(at_len, evaluate_replicas(pack, active, "test", longer)):
            held[n] = values
    for r, test, longer in zip(active, tests, at_len):
        with r.speaking():
            r.tested(test, longer, time.time() - t0)
