"""A run's torch threads follow the cores other processes leave free, while it runs, where its numbers cannot
depend on the count: by default (`threads_follow: null`), and where asked (`true`, which warns where it cannot).

Why: with two threads on two cores and a neighbour holding one of them, every parallel region waits for the
thread the neighbour displaced, and a step costs more than on one thread alone (docs/performance.md, issue 33).

Where: only where a step gives the same bits on every count it may run on. Two checks decide, before the first step:
the model is one whose numbers can (`same_bits_on_any_count`: a recurrent model each of whose layers runs a path
that says so (lnbench.nn.fast.kernel_path.KernelPath: torch's fused LSTM/GRU kernel or lnbench's C++ kernels, whose
rows and columns are computed whole by one thread), on the CPU, without gradient clipping, whose global norm torch
sums in chunks by thread); and a probe: the first batch's loss and every gradient, computed on each candidate count,
equal bit for bit those on the count chosen before the run. The probe is needed: torch's matrix products split their
sums by thread at some shapes and not at others (pmnist's head weight gradient, 10 x 128 over a batch of 64, differs
on 1 and 2 threads; Tiny Shakespeare's does not). Evaluations run on the count chosen before the run, whose shapes
the probe did not see. Elsewhere the count stays as chosen (the run's Runtime: lnbench.config.runtime).
tests/training/test_free_cores.py trains each recurrent claim preset on 1 and 2 threads and compares every number
with what the checks say.

Recorded: the provenance's `threads_follow` says whether the run followed and why; the summary's `threads_followed`
says which counts ran how many steps, and when the count changed.

How: the run starts on the count the cores others left free while the probe ran (measured over START_WINDOW_S at
least: where the probe was quicker, at the first step after that; a short run does not wait for the loop's
samples, nor ever sleeps); then every SAMPLE_S of wall time the loop reads
/proc/stat for the cores this process may use, takes away its own CPU time, and calls what is left busy with
others (steal time included: a hypervisor's other guests take it). The count is the cores minus those, rounded,
between 1 and the count chosen before the run; it changes after two samples in a row agree, so a short burst next
door changes nothing.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple, Optional

import torch

from lnbench.config.runtime import TORCHS_OWN, Runtime, usable_cores
from lnbench.training import tasks

log = logging.getLogger("lnbench")

SAMPLE_S = 1.0
START_WINDOW_S = 0.1  # the least wall time the first count is measured over (/proc/stat counts 10 ms ticks)
MAX_CHANGES_KEPT = 100


def same_bits_on_any_count(cfg, model) -> tuple[bool, str]:
    """(whether this run's numbers are the same on any thread count, why)."""
    if next(model.parameters()).device.type != "cpu":
        return False, "the model is not on the CPU"
    if cfg.clip_grad_norm is not None:
        return False, "clip_grad_norm sums the gradients' norm in thread-sized chunks"
    paths = getattr(model, "kernel_paths", None)  # each layer's KernelPath (lnbench.models.sequence)
    if not paths:
        return False, f"{type(model).__name__}'s ops (matrix products, layer norm's gradient sums) split sums by thread"
    # lnbench's C++ kernels (a row or a column computed whole by one thread, on any count) and torch's fused LSTM/GRU
    # (the same bits on 1 and 2 threads in the presets' training steps, not at every shape: the probe checks each run)
    if other := [str(p) for p in paths if not p.same_bits_on_any_count]:
        return False, f"its recurrence runs on {', '.join(other)}"
    return True, f"its recurrence runs on {', '.join(map(str, paths))}"


def _cpu_ticks(cores: list[int]) -> Optional[int]:
    """Busy clock ticks of `cores` since boot (user, nice, system, irq, softirq, steal), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            lines = f.readlines()
    except OSError:
        return None
    wanted, busy = {f"cpu{c}" for c in cores}, 0
    for line in lines:
        name, *fields = line.split()
        if name in wanted:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
            busy += user + nice + system + irq + softirq + steal
    return busy


def sample(cores: list[int], clock=time.monotonic) -> Optional[tuple[float, int, float]]:
    """(wall clock, busy ticks of `cores`, this process's CPU seconds), or None off Linux."""
    ticks = _cpu_ticks(cores)
    if ticks is None:
        return None
    t = os.times()
    return clock(), ticks, t.user + t.system


class FreeCores:
    """Follows the free cores between steps: `following()` around the steps, `tick(step)` after each, `at_base()`
    around an evaluation, `record()` for the summary."""

    def __init__(
        self,
        base: int,
        allowed: Optional[list[int]] = None,
        cores: Optional[list[int]] = None,
        clock=time.monotonic,
        since: Optional[tuple[float, int, float]] = None,
    ):
        """`since`: a sample (`sample(cores)`) taken before (the probe's start), from which the count to start on
        is measured as soon as START_WINDOW_S have passed: here, or at the first step after (else the run starts on
        `base` and changes by the loop's samples)."""
        self.base, self.cores, self.clock = base, cores or usable_cores(), clock
        self.allowed = sorted(allowed or range(1, base + 1))
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.current, self.pending = base, None
        self.changes: list[list[int]] = []
        self.steps_at: dict[int, int] = {}
        self.last = self.sample()
        self.since = since if self.last is not None else None
        self.start(0)

    def start(self, step: int) -> None:
        """The count to start on, from the cores others took since `since`, once its window is long enough: at
        once, without the two samples in a row that a change needs later."""
        if self.since is None or self.last[0] - self.since[0] < START_WINDOW_S:
            return
        busy, self.since = self.busy_elsewhere(self.since, self.last), None
        if (want := self.target(busy)) != self.current:
            self.change(step, want, busy, "the start" if step == 0 else f"step {step}")

    def change(self, step: int, want: int, busy: float, when: str) -> None:
        self.current = want
        torch.set_num_threads(want)
        if len(self.changes) < MAX_CHANGES_KEPT:
            self.changes.append([step, want])
        log.info("threads: %d from %s (%.1f of %d cores busy with other processes)", want, when, busy, len(self.cores))

    def sample(self) -> Optional[tuple[float, int, float]]:
        return sample(self.cores, self.clock)

    def busy_elsewhere(self, before, now) -> float:
        """Cores' worth of CPU time other processes took between two samples."""
        wall = now[0] - before[0]
        theirs = (now[1] - before[1]) / self.hz - (now[2] - before[2])
        return max(theirs / wall, 0.0) if wall > 0 else 0.0

    def target(self, busy: float) -> int:
        """The most threads the probe allowed within the cores others leave free (at least the fewest allowed)."""
        free = round(len(self.cores) - busy)
        return max([n for n in self.allowed if n <= free], default=self.allowed[0])

    def tick(self, step: int) -> None:
        self.steps_at[self.current] = self.steps_at.get(self.current, 0) + 1
        if self.since is not None:  # the start's window is still short: measured over it as soon as it is not
            if self.clock() - self.since[0] >= START_WINDOW_S:
                self.last = self.sample()
                self.start(step)
            return
        if self.last is None or self.clock() - self.last[0] < SAMPLE_S:
            return
        now = self.sample()
        busy, self.last = self.busy_elsewhere(self.last, now), now
        want = self.target(busy)
        if want == self.current:
            self.pending = None
        elif want != self.pending:
            self.pending = want
        else:
            self.pending = None
            self.change(step, want, busy, f"step {step}")

    @contextmanager
    def following(self):
        """The training steps' scope: yields `tick`, and puts the run's own count back however it ends."""
        torch.set_num_threads(self.current)
        try:
            yield self.tick
        finally:
            torch.set_num_threads(self.base)

    @contextmanager
    def at_base(self):
        """An evaluation runs on the count chosen before the run: its shapes were not probed."""
        torch.set_num_threads(self.base)
        try:
            yield
        finally:
            torch.set_num_threads(self.current)

    def record(self) -> dict[str, Any]:
        return {
            "policy": "free cores",
            "base": self.base,
            "allowed": self.allowed,
            "steps_at": {str(k): v for k, v in self.steps_at.items()},
            "changes": self.changes,
        }


def candidates(base: int) -> list[int]:
    """The counts the probe tries: all up to 4, then powers of two and the count chosen before the run."""
    return sorted({n for n in range(1, base + 1) if n <= 4 or n & (n - 1) == 0} | {base})


def probe(step: Callable[[], list[torch.Tensor]], base: int) -> tuple[list[int], list[int]]:
    """(counts on which `step` gives the same bits as on `base`, those on which it does not). `step` computes
    one batch's loss and gradients and returns them; the torch RNG is put back after each call, so the run
    draws what it would have drawn without the probe."""
    rng = torch.get_rng_state()
    results = {}
    try:
        for n in [base] + [c for c in candidates(base) if c != base]:
            torch.set_num_threads(n)
            results[n] = step()
            torch.set_rng_state(rng)
    finally:
        torch.set_num_threads(base)
    same = [n for n in results if all(torch.equal(a, b) for a, b in zip(results[n], results[base]))]
    return sorted(same), sorted(set(results) - set(same))


def gradients(model, spec, batch: list[torch.Tensor]) -> list[torch.Tensor]:
    """One batch's loss and gradients, the model left as it was (BN's running averages put back)."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = batch
    loss = tasks.loss_and_metrics(spec, model(x), y)[0]
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    model.load_state_dict(state)
    return [loss.detach(), *(g for g in grads if g is not None)]


class Decision(NamedTuple):
    """Whether a run follows the free cores: its FreeCores (None: the count stays as chosen) and the provenance's
    words for it."""

    follower: Optional[FreeCores]
    said: str


def follower(cfg, runtime: Runtime, model, spec, batch: Callable[[], list[torch.Tensor]]) -> Decision:
    """Whether this run follows the free cores: where its runtime lets it (threads_follow null or true) and its
    numbers allow it, a FreeCores on the count the cores others leave free now; else none, and why (logged: a
    warning where threads_follow=true asked for it). `batch()`: the next training batch, for the probe."""
    base = runtime.threads
    if runtime.follow is False:
        return Decision(None, f"fixed at {base} (threads_follow=false)")
    if runtime.follow is None and runtime.why == TORCHS_OWN:  # a caller's process (a notebook): its count is its own
        return Decision(None, f"fixed at {base} (torch's own count in a process lnbench did not start)")
    before = sample(list(runtime.cores))  # the probe's time is the first count's window
    ok, why = same_bits_on_any_count(cfg, model)
    if ok and base < 2:  # nothing to probe: no count below it to drop to
        ok, why = False, "it runs on 1 thread: there is no smaller count to drop to while other processes hold cores"
    if ok:
        first = batch()
        same, other = probe(lambda: gradients(model, spec, first), base)
        if len(same) < 2:
            ok, why = False, f"its first step's gradients differ on {', '.join(map(str, other))} threads"
    if not ok:
        (log.warning if runtime.follow else log.info)(
            "threads_follow=%s: the thread count stays at %d, since this run's numbers would change with it (%s)",
            "true" if runtime.follow else "null",
            base,
            why,
        )
        return Decision(None, f"fixed at {base} ({why})")
    counts = " or ".join(map(str, same))
    log.info("threads: follows the free cores, on %s threads (%s)", counts, why)
    return Decision(
        FreeCores(base, allowed=same, cores=list(runtime.cores), since=before),
        f"free cores on {counts} threads ({why})",
    )
