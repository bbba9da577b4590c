"""Where a sweep job's time goes, read back from the phases its processes recorded ($LNBENCH_PHASES,
lnbench.phases, whose names this module reads): ms per phase per job and its share of the job, and the sweep's own
start and end.

A job's time is a joblib worker's (or the basic launcher's process's) from Hydra's on_job_start of the job to the
on_job_start of the next one, so the launcher's and Hydra's work between jobs (the result sent back, the next job
pickled, sent and unpickled, its config composed, its directory, logging and .hydra/*.yaml: Hydra gives no hook to
time these apart) counts as the job's; the last job of each worker is measured to its on_job_end, plus the typical
gap. Phases in [brackets] are spans that hold others: what they hold is subtracted, their remainder is named
"(rest)".
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from lnbench import phases as P

CHILD_REST = "job: child (rest)"
TASK_REST = "job: task (rest: crash.log, lock, records)"
AROUND_TASK = "hydra: around the task (callbacks, loggers flushed)"
BETWEEN = "hydra and the launcher between jobs (result back, next job sent, composed, its directory, .hydra/*.yaml)"


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


def span(r: dict[str, Any]) -> float:
    return r["t1"] - r["t0"]


def jobs(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Run directory -> {phase: seconds} for every job that ran in a worker, with `total` its time."""
    child_pids = {r["pid"] for r in records if r["phase"] == P.JOB_FORK}
    in_child: dict[str, list[dict]] = defaultdict(list)
    by_pid: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        if r["pid"] in child_pids:
            in_child[r["job"]].append(r)
        elif not r["phase"].startswith(P.SWEEP) and r["phase"] != P.WORKER_START:
            by_pid[r["pid"]].append(r)
    out: dict[str, dict[str, float]] = {}
    gaps: list[float] = []
    for rs in by_pid.values():
        rs.sort(key=lambda r: r["t0"])
        starts = [i for i, r in enumerate(rs) if r["phase"] == P.HYDRA_JOB]
        for k, i in enumerate(starts):
            hydra_job = rs[i]
            seg = rs[i : starts[k + 1] if k + 1 < len(starts) else len(rs)]
            task = next((r for r in seg if r["phase"] == P.TASK), None)
            if task is None:
                continue
            job = task["job"]
            ph: dict[str, float] = defaultdict(float)
            for r in seg:
                if not r["phase"].startswith("["):
                    ph[r["phase"]] += span(r)
            kids = in_child.get(job, [])
            for r in kids:
                ph[r["phase"]] += span(r)
            fork = next((r for r in kids if r["phase"] == P.JOB_FORK), None)
            answered = next((r for r in seg if r["phase"] == P.JOB_EXIT), None)
            if fork and answered:
                ph[CHILD_REST] = answered["t0"] - fork["t0"] - sum(span(r) for r in kids)
            ph[AROUND_TASK] = span(hydra_job) - span(task)
            in_task = sum(v for p, v in ph.items() if p.startswith(("job:", "run:")))
            ph[TASK_REST] = span(task) - in_task
            if k + 1 < len(starts):
                gap = rs[starts[k + 1]]["t0"] - hydra_job["t1"]
                ph[BETWEEN] = gap
                gaps.append(gap)
            ph["total"] = sum(ph.values())
            ph["first"] = float(k == 0)  # a worker's first job: it imports what the others find loaded
            out[job] = dict(ph)
    if gaps:  # a worker's last job: the typical gap, not none
        for ph in out.values():
            if BETWEEN not in ph:
                ph[BETWEEN] = statistics.median(gaps)
                ph["total"] += statistics.median(gaps)
    return out


def sweep_phases(records: list[dict[str, Any]]) -> dict[str, float]:
    """The sweep's own phases (its process's start, preflight, Hydra's start-up, the end block) and each
    worker's start to its first job, seconds (workers: the mean)."""
    out: dict[str, float] = defaultdict(float)
    workers = [span(r) for r in records if r["phase"] == P.WORKER_START]
    for r in records:
        if r["phase"].startswith(P.SWEEP):
            out[r["phase"]] += r["t1"] - r["t0"]
    if workers:
        out[f"{P.WORKER_START} (mean)"] = statistics.mean(workers)
    return dict(out)


def steady(per_job: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The jobs after each worker's first (which pays the worker's imports once): what every further job costs."""
    return {j: ph for j, ph in per_job.items() if not ph.get("first")} or per_job


def first_extra(per_job: dict[str, dict[str, float]]) -> float:
    """Seconds a worker's first job takes beyond a further job's (mean): the worker's warm-up, once."""
    first = [ph["total"] for ph in per_job.values() if ph.get("first")]
    rest = [ph["total"] for ph in steady(per_job).values()]
    return statistics.mean(first) - statistics.mean(rest) if first and rest else 0.0


def table(per_job: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Rows {phase, ms (mean per job), share (of the mean job)}, largest first, then `total`, `fixed` (all but
    the training steps and evaluations) and `work`."""
    if not per_job:
        return []
    names = sorted({p for ph in per_job.values() for p in ph} - {"total", "first"})
    mean = {p: statistics.mean(ph.get(p, 0.0) for ph in per_job.values()) for p in names}
    total = statistics.mean(ph["total"] for ph in per_job.values())
    rows = [{"phase": p, "ms": mean[p] * 1e3, "share": mean[p] / total} for p in sorted(names, key=lambda p: -mean[p])]
    work = sum(mean.get(p, 0.0) for p in P.WORK)
    rows += [
        {"phase": "total per job", "ms": total * 1e3, "share": 1.0},
        {"phase": "work (training steps, evaluations)", "ms": work * 1e3, "share": work / total},
        {"phase": "fixed cost (the rest)", "ms": (total - work) * 1e3, "share": (total - work) / total},
    ]
    return rows


def markdown(rows: list[dict[str, Any]], jobs_n: int) -> str:
    lines = [f"| phase (mean of {jobs_n} jobs) | ms per job | share of the job |", "|---|---:|---:|"]
    lines += [f"| {r['phase']} | {r['ms']:.1f} | {100 * r['share']:.1f}% |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m lnbench.bench.jobcost PHASES_FILE
    import sys

    recs = read(Path(sys.argv[1]))
    per_job = jobs(recs)
    print(markdown(table(steady(per_job)), len(steady(per_job))))
    print(f"\na worker's first job: {first_extra(per_job) * 1e3:.0f} ms more")
    for k, v in sweep_phases(recs).items():
        print(f"{k}: {v * 1e3:.0f} ms")
