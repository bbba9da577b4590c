"""Who runs the rounds of `lnbench check`'s presets (lnbench.check.preset.PresetCheck.rounds).

- `PoolRunner` (the basic and joblib launchers, the default): one warm pool for the whole check
  (lnbench.launch.process.pool) and one Hydra in this process (lnbench.check.inprocess). Every preset's rounds
  run at once: a preset whose round waits for its last jobs leaves the cores to the other presets' jobs, so
  they never wait for the slowest preset. Jobs are dispatched by preset order (the cheap presets first, so that
  a first verdict comes early), a preset's later rounds before the next preset's jobs, a round seed by seed.
  Once the check's --budget has run out no queued job starts (a rerun runs it): each preset's round ends with
  its running jobs, and the preset stops there (lnbench.check.preset).
- `SubprocessRunner` (SLURM, submitit): each round's sweeps are `lnbench train -m` processes of their own, one
  preset after the other, as before: each job a SLURM job.

Ctrl-C or SIGTERM: no job starts after it, each running job writes its checkpoint and stops, and the check
exits 130 (KeyboardInterrupt); the same command resumes. A second signal a second or more later stops at once.
"""

from __future__ import annotations

import heapq
import itertools
import math
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from lnbench.check.budget import Budget
from lnbench.check.inprocess import InProcessHydra, SweepRefused
from lnbench.check.preset import Outcome, PresetCheck
from lnbench.launch.process.guardian import die_with_parent
from lnbench.launch.process.isolate import STOP_SIGNALS
from lnbench.launch.process.pool import WarmPool
from lnbench.launch.sweep import stop as sweep_stop

Done = Callable[[Outcome], None]


def run_sweep(args: list[str]) -> int:
    """`lnbench train ARGS` as a process of its own; its exit code."""
    cmd = [sys.executable, "-m", "lnbench.cli", "train", *args]
    print(f"\nlnbench check: {' '.join(cmd[3:])}", flush=True)
    sweep = subprocess.Popen(cmd, preexec_fn=die_with_parent)  # a killed check leaves no sweep training on
    try:
        return sweep.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the sweep too: let its jobs write their checkpoints (never kill it mid-write)
        sweep.wait()
        raise


class SubprocessRunner:
    overlapping = False  # one preset's rounds after the other's

    def __init__(self, workers: int):
        self.workers = workers

    def run(self, checks: list[PresetCheck], done: Done, budget: Budget) -> None:
        # each round a process of its own: the budget stops a preset between them (lnbench.check.preset)
        for check in checks:
            steps = check.rounds()
            try:
                sweeps = next(steps)
                while True:
                    sweeps = steps.send([run_sweep(a) for a in sweeps])
            except StopIteration as end:
                done(end.value)


@dataclass
class Active:
    """A preset between two of its rounds: the sweeps of the round it waits for and their jobs still to end."""

    check: PresetCheck
    steps: Any  # its rounds() generator
    order: int
    sweeps: list = field(default_factory=list)  # inprocess.ComposedSweep, or an int (a refused sweep's code)
    left: int = 0  # jobs of the round not ended yet
    rounds: int = 0  # rounds started so far
    advancing: Future | None = None  # its next round being made (composed, judged) in the helper thread


def seed_rank(overrides: list[str]) -> float:
    """A job's seed, to run a round seed by seed across its cells (Hydra lists them cell by cell): a round the
    budget cuts short then leaves whole pairs of judging seeds, not one line's seeds alone."""
    seed = next((o.split("=", 1)[1] for o in overrides if o.startswith("seed=")), "")
    try:
        return float(seed)
    except ValueError:
        return math.inf


@dataclass(order=True)
class Ticket:
    priority: tuple
    active: Active = field(compare=False)
    sweep: Any = field(compare=False)
    idx: int = field(compare=False)
    overrides: list[str] = field(compare=False)


class PoolRunner:
    overlapping = True  # every preset's rounds at once, on one warm pool

    def __init__(self, workers: int, env: dict[str, str]):
        self.workers, self.env = workers, env
        self.queue: list[Ticket] = []
        self.running: dict[int, Ticket] = {}
        self.pool = None
        self.hydra = None
        self.seq = itertools.count()
        self.signum: int | None = None
        self.first_signal = 0.0

    # ---- the loop ------------------------------------------------------------------------------------
    def run(self, checks: list[PresetCheck], done: Done, budget: Budget) -> None:
        self.pool = WarmPool(self.workers, self.env)  # its workers warm up while the first sweeps are composed
        helper = ThreadPoolExecutor(1, thread_name_prefix="lnbench-check")  # Hydra, reports: one at a time
        try:
            self.hydra = helper.submit(InProcessHydra).result()
            active = [Active(c, c.rounds(), i) for i, c in enumerate(checks)]
            with self.stop_signals():
                for a in active:
                    a.advancing = helper.submit(self._advance, a, None)
                while active:
                    for a in [a for a in active if a.advancing is not None and a.advancing.done()]:
                        a.advancing, outcome = None, a.advancing.result()
                        if outcome is not None:
                            active.remove(a)
                            done(outcome)
                        elif not self._enqueue(a):  # nothing to run (every sweep refused): on to the next round
                            a.advancing = helper.submit(self._advance, a, a.sweeps)
                    if self.signum is not None:
                        self._stop()
                    if budget.out():
                        for a in self._unqueue():  # rounds left with nothing running: on to their end
                            a.advancing = helper.submit(self._advance, a, a.sweeps)
                    self._dispatch()
                    for ticket, result in self._results():
                        self._ended(ticket, result)
                        if ticket.active.left == 0:
                            ticket.active.advancing = helper.submit(self._advance, ticket.active, ticket.active.sweeps)
        finally:
            helper.shutdown(wait=True)
            self.pool.close()
            if self.hydra is not None:
                self.hydra.close()

    def _advance(self, a: Active, ended: list | None) -> Outcome | None:
        """In the helper thread: the round that ended (its sweeps' ends and exit codes) sent to the preset, and its
        next round composed (None), or its Outcome."""
        codes = None if ended is None else [s if isinstance(s, int) else s.end() for s in ended]
        for s in ended or ():
            if not isinstance(s, int):
                self.pool.forget(s.context.key)
        try:
            args = next(a.steps) if codes is None else a.steps.send(codes)
        except StopIteration as end:
            return end.value
        a.sweeps, a.rounds = [], a.rounds + 1
        for sweep_args in args:
            print(f"\nlnbench check: train {' '.join(sweep_args)}", flush=True)
            try:
                a.sweeps.append(self.hydra.sweep(sweep_args))
            except SweepRefused as e:
                print(f"lnbench: {e}", file=sys.stderr, flush=True)
                a.sweeps.append(2)
        return None

    def _enqueue(self, a: Active) -> int:
        """The jobs of a preset's new round queued; how many."""
        a.left = 0
        for s in a.sweeps:
            if isinstance(s, int):
                continue
            for idx, overrides in s.jobs:
                priority = (a.order, seed_rank(overrides), next(self.seq))
                heapq.heappush(self.queue, Ticket(priority, a, s, idx, overrides))
                a.left += 1
        return a.left

    def _unqueue(self) -> list[Active]:
        """The budget has run out: the queued jobs are left unstarted (a rerun runs them, as Hydra resumes a
        sweep); the presets whose round has no job running now, to be advanced."""
        for t in self.queue:
            t.active.left -= 1
        ended = {id(t.active): t.active for t in self.queue if t.active.left == 0}
        self.queue.clear()
        return list(ended.values())

    def _dispatch(self) -> None:
        if self.signum is not None:
            return
        for w in self.pool.idle:
            if not self.queue:
                return
            t = heapq.heappop(self.queue)
            self.pool.run(w, t, t.sweep.context, t.idx, t.overrides)
            self.running[w.pid] = t

    def _results(self) -> list:
        out = self.pool.results(0.2)
        for ticket, _ in out:
            self.running = {pid: t for pid, t in self.running.items() if t is not ticket}
        return out

    def _ended(self, ticket: Ticket, result) -> None:
        ticket.active.left -= 1
        if result.status in ("completed", "interrupted", "not started"):
            return
        line = f"job {ticket.idx} of {ticket.sweep.out_dir}: {result.error or result.status}"
        ticket.sweep.failed.append(line)
        if result.status == "error":
            print(f"lnbench: {line}", file=sys.stderr, flush=True)

    # ---- stopping ----------------------------------------------------------------------------------------
    @contextmanager
    def stop_signals(self):
        previous = {s: signal.signal(s, self._signal) for s in STOP_SIGNALS}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def _signal(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum, self.first_signal = signum, time.monotonic()
            print(
                f"\nlnbench check: {signal.Signals(signum).name} received: each running job writes a checkpoint and "
                "stops; no other job starts (send it again to stop at once).",
                file=sys.stderr,
                flush=True,
            )
            self.pool.signal_busy(signum)
        elif time.monotonic() - self.first_signal > 1.0:
            self.pool.kill()
            raise KeyboardInterrupt

    def _stop(self) -> None:
        """After a stop signal: wait for the running jobs (each writes its checkpoint), then stop the check."""
        stopped = {t.sweep.out_dir for t in [*self.queue, *self.running.values()]}
        while self.pool.busy:
            self._results()
        for folder in stopped:
            sweep_stop.clear(folder)  # the marks its interrupted jobs left: a rerun starts the sweep afresh
        raise KeyboardInterrupt
