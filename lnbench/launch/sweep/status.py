"""`lnbench status DIR`: how far a run, a sweep or a check has got, live or finished, from its files alone.

Each job's state comes from its directory (lnbench.runs): its summary.json once it has ended; running while a
process holds its lock, or, where that lock cannot be seen (a SLURM job on another node), while its log was
written in the last FRESH_S seconds. A sweep's jobs that have no directory yet are pending: Hydra's
multirun.yaml says how many it has in all (lnbench.runs.sweep_total). A check's jobs are counted per stage
(tune: the preset's sweep; widen and judge: the rounds lnbench check added, each a sweep of its own).

The time left is an estimate: each running job's steps left at its own pace so far, plus the pending jobs at
the mean length of the jobs seen, shared among as many slots as jobs run now.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lnbench.config.choices import Stage
from lnbench.errors import OptionsParser, UserError, resume_command
from lnbench.runs import (
    CHECK_RECORD,
    HYDRA,
    HYDRA_CONFIG,
    METRICS,
    MULTIRUN,
    OVERRIDES,
    SKIP_DIRS,
    SUMMARY,
    TRAIN_LOG,
    Run,
    check_command,
    find_check_record,
    find_run_dirs,
    load_run,
    process_alive,
    recorded_sweep,
    sweep_record_problem,
    sweep_total,
    unreadable_text,
)

FRESH_S = 300.0  # a log written this recently is a running job's, where its lock cannot be seen
DONE = ("completed", "failed", "diverged")


@dataclass
class Job:
    run: Run
    state: str  # completed, failed, diverged, running, stopped (interrupted or killed: a rerun resumes it)
    sweep: Path | None  # the sweep directory it belongs to (None: a single run)
    stage: Stage

    @property
    def step(self) -> int:
        """The steps done: its log's last, or its summary's where that says more (a job stopped between logs)."""
        logged = max((int(r["step"]) for r in self.run.records if "step" in r), default=0)
        done = self.run.summary.get("steps")
        return max(logged, done) if isinstance(done, int) and not isinstance(done, bool) else logged

    @property
    def steps(self) -> int | None:
        steps = self.run.value("steps")
        return steps if isinstance(steps, int) and steps > 0 else None

    @property
    def seconds(self) -> float:
        """Seconds of training so far (every attempt's), from its log."""
        return max((float(r["time"]) for r in self.run.records if isinstance(r.get("time"), (int, float))), default=0.0)

    @property
    def seconds_left(self) -> float | None:
        if self.state != "running" or not self.step or not self.steps:
            return None
        return max(0, self.steps - self.step) * self.seconds / self.step


def state_of(run: Run, now: float) -> str:
    """Its summary's status once it ended; else its lock says whether it runs, where the lock can be seen from
    here (a run killed with kill -9 left its lock file, which no process holds: stopped, however fresh its
    files); only where it cannot (a SLURM job on another node) do fresh files say it runs."""
    status = run.status
    if status in (*DONE, "running", "unreadable"):  # unreadable: a record of it is damaged (its summary says which)
        return status
    if status in ("incomplete", "not started") and not run.lock_seen and fresh(run.path, now):
        return "running"
    return "stopped"


def fresh(path: Path, now: float) -> bool:
    for name in (METRICS, TRAIN_LOG, OVERRIDES):
        try:
            if now - (path / name).stat().st_mtime < FRESH_S:
                return True
        except OSError:
            continue
    return False


def sweep_of(path: Path, root: Path) -> Path | None:
    """The nearest directory at or above the job's parent, up to `root`, that holds a multirun.yaml."""
    for folder in [path.parent, *path.parent.parents]:
        if folder != root and root not in folder.parents:  # above `root`: a job given alone is a run
            return None
        if (folder / MULTIRUN).is_file():
            return folder
    return None


def jobs_in(root: Path, now: float, cache: dict[Path, tuple[tuple, Run]] | None = None) -> list[Job]:
    """The jobs under `root`. With a cache (a sweep's process looks every few seconds), a job whose files did not
    change since the last look is not read again: a big sweep's finished jobs would cost a core's share each time."""
    jobs = []
    for path in find_run_dirs(root):
        run = cached_run(path, root, cache) if cache is not None else load_run(path, root)
        jobs.append(Job(run, state_of(run, now), sweep_of(run.path, root), Stage.of(run.config.get("stage"))))
    return jobs


def cached_run(path: Path, root: Path, cache: dict[Path, tuple[tuple, Run]]) -> Run:
    signature = tuple(_stat(path / name) for name in (SUMMARY, METRICS, HYDRA_CONFIG))
    seen = cache.get(path)
    if seen is None or seen[0] != signature:
        cache[path] = (signature, load_run(path, root))
    run = cache[path][1]
    if run.summary.get("status") not in DONE:  # its lock may have gone (killed) with no file changed
        run.see_lock()
    return run


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, -1)
    return (st.st_mtime_ns, st.st_size)


def sweeps_in(root: Path) -> list[Path]:
    found = [root] if (root / MULTIRUN).is_file() else []
    return found + sorted(
        p.parent for p in root.rglob(MULTIRUN) if p.parent != root and not SKIP_DIRS & set(p.relative_to(root).parts)
    )


@dataclass
class Tally:
    """Jobs counted by state, with those announced but not started yet."""

    counts: Counter
    pending: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values()) + self.pending

    def text(self) -> str:
        done = sum(self.counts[s] for s in DONE)
        how = ", ".join(f"{self.counts[s]} {s}" for s in DONE if self.counts[s])
        parts = [f"{done} of {self.total} done" + (f" ({how})" if how else "")]
        parts += [f"{self.counts[s]} {s}" for s in ("running", "stopped", "unreadable") if self.counts[s]]
        parts += [f"{self.pending} pending"] if self.pending else []
        return ", ".join(parts)


def tally(jobs: list[Job], sweeps: list[Path]) -> Tally:
    counts = Counter(j.state for j in jobs)
    pending = 0
    for sweep in sweeps:
        total = sweep_total(sweep)
        seen = sum(1 for j in jobs if j.sweep == sweep)
        pending += max(0, (total or 0) - seen)
    return Tally(counts, pending)


def seconds_left(jobs: list[Job], pending: int) -> float | None:
    """Running jobs' steps left at their pace, plus pending jobs at the mean job length, over the slots in use."""
    running = [j for j in jobs if j.state == "running"]
    lengths = [j.seconds for j in jobs if j.state == "completed" and j.seconds] or [
        j.seconds * j.steps / j.step for j in running if j.step and j.steps
    ]
    if (pending and not lengths) or any(j.seconds_left is None for j in running):
        return None
    work = sum(j.seconds_left or 0.0 for j in running) + pending * (statistics.mean(lengths) if lengths else 0.0)
    return work / max(1, len(running))


def elapsed(root: Path, jobs: list[Job], now: float, live: bool) -> float:
    """From the sweep's (or first job's) start to now while live, else to its last write."""
    firsts = [root / MULTIRUN, *(j.run.path / HYDRA for j in jobs)]
    lasts = [p for j in jobs for p in (j.run.path / SUMMARY, j.run.path / METRICS)]
    starts = [p.stat().st_mtime for p in firsts if p.exists()]
    ends = [p.stat().st_mtime for p in lasts if p.exists()]
    if not starts:
        return 0.0
    return (now if live else max(ends, default=min(starts))) - min(starts)


def minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def label(job: Job, jobs: list[Job]) -> str:
    """The job's name and its values of the keys its sweep varies: from the sweep's record (multirun.yaml), so a
    job keeps its label as other jobs appear; without one, the values that tell it from the jobs seen so far."""
    swept = _swept_keys(job.sweep) if job.sweep is not None else None
    if swept is None:
        mates = [j.run.overrides for j in jobs if j.sweep == job.sweep]
        swept = {k for k, v in job.run.overrides.items() if any(m.get(k) != v for m in mates)}
    values = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in job.run.overrides.items() if k in swept)
    return f"{job.run.name}" + (f" ({values})" if values else "")


def _swept_keys(sweep: Path) -> set[str] | None:
    try:
        return {k.lstrip("+~") for k in recorded_sweep(sweep).swept()}
    except Exception:  # noqa: BLE001 - no record, or one this version cannot read
        return None


def kind_of(root: Path, jobs: list[Job], sweeps: list[Path]) -> str:
    """check (lnbench check's folder: its page, or rounds it added), sweeps (a folder of several), sweep, run, runs."""
    if len(jobs) == 1 and jobs[0].run.path == root and not sweeps:  # one run, a check's judging run included
        return "run"
    if any(j.stage != Stage.tune for j in jobs) or (root / "check.md").is_file():
        return "check"
    if len(sweeps) > 1:
        return "sweeps"
    if sweeps:
        return "sweep"
    return "runs"


def lines(root: Path, now: float | None = None) -> list[str]:
    """What `lnbench status` prints for `root`."""
    now = time.time() if now is None else now
    given, check = root, find_check_record(root)
    root = root.absolute() if check else root  # paths compared with the check's --out, which is absolute
    jobs, sweeps = jobs_in(root, now), sweeps_in(root)
    if not jobs and not sweeps and not check:
        raise UserError(
            f"no runs under {root} (no {SUMMARY}, {METRICS}, {OVERRIDES} or "
            f"{MULTIRUN}): give the directory of a run, a sweep or a check (outputs/check)."
        )
    kind, whole = kind_of(root, jobs, sweeps), tally(jobs, sweeps)
    check = check if kind != "run" else None  # one job of a check is a run
    kind = "check" if check else kind
    state = check_state(check[1], now) if check else ""
    out = [f"{kind} {given}" + (f" ({state}: `{check_command(check[1])}`)" if check else "")]
    if kind in ("check", "sweeps"):
        out += stage_lines(check[0] if check else root, jobs, sweeps, stages=kind == "check")
    if kind == "run":
        out.append(
            f"  state      {jobs[0].state}, step {jobs[0].step}" + (f" of {jobs[0].steps}" if jobs[0].steps else "")
        )
    else:
        out.append(f"  jobs       {whole.text()}")
    out += [f"  running    {label(j, jobs)}: {progress(j)}" for j in jobs if j.state == "running"]
    out += [f"  skipped    {label(j, jobs)}: {unreadable_text(j.run.unreadable)}" for j in jobs if j.run.unreadable]
    out += [f"  unreadable {j.run.name}: {j.run.summary.get('error')}" for j in jobs if j.state == "unreadable"]
    out += [f"  unreadable {problem}" for s in sweeps if (problem := sweep_record_problem(s))]
    if not check and (given / CHECK_RECORD).exists():  # find_check_record reads the check's own folder as its
        out.append(f"  unreadable {given / CHECK_RECORD}: not the record lnbench check writes (its command unknown)")
    if check and state != "running" and not whole.counts["running"]:  # no estimate: nothing will run until resumed
        so_far = minutes(elapsed(root, jobs, now, False))
        again = f"`{check_command(check[1])}` continues it" if state != "finished" else "nothing left to run"
        return out + [f"  time       {so_far} from start to last write; nothing running ({state}: {again})"]
    return out + [time_line(root, kind, jobs, whole, now)]


def check_state(record: dict, now: float) -> str:
    """running, stopped (Ctrl-C, or its process gone: kill -9, a crash) or finished, from the check's record."""
    state = record.get("state")
    if state == "running" and isinstance(record.get("pid"), int) and isinstance(record.get("host"), str):
        alive = process_alive(record["pid"], record["host"])
        return "stopped (its process is gone)" if alive is False else "running"
    return "stopped" if state == "stopped" else "finished" if state == "finished" else "running"


def progress(job: Job) -> str:
    """ "step 30 of 100, ~7 s left" for a running job."""
    left = job.seconds_left
    return (
        f"step {job.step}"
        + (f" of {job.steps}" if job.steps else "")
        + (f", ~{minutes(left)} left" if left is not None else "")
    )


def time_line(root: Path, kind: str, jobs: list[Job], whole: Tally, now: float) -> str:
    live = whole.counts["running"] > 0
    so_far = minutes(jobs[0].seconds if kind == "run" else elapsed(root, jobs, now, live))
    if live or whole.pending:
        left = seconds_left(jobs, whole.pending)
        return f"  time       {so_far} so far, " + (
            f"~{minutes(left)} left (estimate)" if left is not None else "time left unknown until a job has logged"
        )
    stopped = whole.counts["stopped"]
    return (
        f"  time       {so_far} {'of training' if kind == 'run' else 'from start to last write'}; nothing running"
        + (f" (stopped: `{resume_command(root)}` continues it)" if stopped and kind == "run" else "")
        + (f" ({stopped} stopped: run the same command again to resume)" if stopped and kind != "run" else "")
    )


def stage_lines(root: Path, jobs: list[Job], sweeps: list[Path], stages: bool = True) -> list[str]:
    """A line per preset of a check (a top folder of `root`): its jobs counted per stage (`stages`: named)."""
    out = []
    presets = sorted(
        {(j.sweep or j.run.path).relative_to(root).parts[0] for j in jobs if j.sweep != root}
        | {s.relative_to(root).parts[0] for s in sweeps if s != root}
    )
    width = max(map(len, presets), default=0)
    for preset in presets:
        mine = [j for j in jobs if j.run.path.relative_to(root).parts[0] == preset]
        mine_sweeps = [s for s in sweeps if s != root and s.relative_to(root).parts[0] == preset]
        parts = []
        for stage in Stage:
            staged = [j for j in mine if j.stage == stage]
            stage_sweeps = [s for s in mine_sweeps if stage_of_sweep(s) == stage]
            if staged or stage_sweeps:
                parts.append(f"{stage.value} " * stages + tally(staged, stage_sweeps).text())
        out.append(f"  {preset:<{width}}  " + " · ".join(parts or ["no jobs yet"]))
    return out


def stage_of_sweep(sweep: Path) -> Stage:
    """widen-K and judge-K are lnbench check's rounds (lnbench.check.rounds); any other sweep tunes."""
    return Stage.of(sweep.name.split("-", 1)[0])


def main(argv: list[str] | None = None) -> int:
    p = OptionsParser(
        prog="lnbench status",
        description="How far a run, a sweep or a check has got: its jobs by state "
        "(per stage for a check), the time so far and an estimate of the time left.",
    )
    p.add_argument("dir", type=Path, metavar="DIR", help="a run, a sweep or a check directory (live or finished)")
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
        if not args.dir.is_dir():
            what = "is a file, not a directory" if args.dir.exists() else "does not exist"
            raise UserError(f"DIR {args.dir} {what}: give the directory of a run, a sweep or a check (outputs/check).")
        print("\n".join(lines(args.dir)))
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except UserError as e:
        print(f"lnbench: error: {e}", file=sys.stderr)
        return 2
    return 0
