"""What a round of `lnbench check` costs besides its jobs' training, before and after the warm pool (issue 39):

    python -m lnbench.check.startcost [--preset ln_gain_init] [--steps 300] [--out DIR]

The issue's measure: the wall time of the preset's sweep at 1 step (every job: its start, one step, its
evaluations) over the same sweep at its `steps`, each run two ways, alternating:
- cold: `lnbench train -m +experiment=PRESET hydra/launcher=joblib logger=none progress=false steps=S`, a process
  of its own (Hydra's start, preflight, loky's workers and their imports), as each round ran before;
- warm: the same sweep composed in this process (lnbench.check.inprocess) and run on a pool whose workers ran a
  sweep of the preset before (lnbench.launch.process.pool), as lnbench check runs every round now. The pool's own
  start is once per check, and is printed apart.
Each sweep writes into a fresh directory under --out (a temporary one by default). Read the load beside it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE = ["hydra/launcher=joblib", "logger=none", "progress=false"]


def cold(preset: str, steps: int, folder: Path) -> float:
    cmd = [sys.executable, "-m", "lnbench.cli", "train", "-m", f"+experiment={preset}", *BASE, f"steps={steps}"]
    t0 = time.perf_counter()
    proc = subprocess.run([*cmd, f"hydra.sweep.dir={folder}"], capture_output=True, text=True)
    if proc.returncode != 0:  # a failed job still took its time: said, and counted
        print(f"cold sweep {folder} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    return time.perf_counter() - t0


def warm(pool, hydra, preset: str, steps: int, folder: Path) -> float:
    t0 = time.perf_counter()
    sweep = hydra.sweep(["-m", f"+experiment={preset}", *BASE, f"steps={steps}", f"hydra.sweep.dir={folder}"])
    todo = list(sweep.jobs)
    while todo or pool.busy:
        for w in pool.idle:
            if todo:
                idx, overrides = todo.pop(0)
                pool.run(w, idx, sweep.context, idx, overrides)
        pool.results(0.05)
    sweep.end()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lnbench.check.startcost", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="ln_gain_init")
    p.add_argument("--steps", type=int, default=300, help="the preset's full sweep (default: ln_gain_init's 300)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from lnbench.check.inprocess import InProcessHydra  # noqa: PLC0415 (Hydra: not for --help)
    from lnbench.config.launchers import JOBLIB  # noqa: PLC0415
    from lnbench.launch.process.pool import WarmPool, joblib_env  # noqa: PLC0415

    out = args.out or Path(tempfile.mkdtemp(prefix="lnbench-startcost-"))
    load = [os.getloadavg()[0]]
    t0 = time.perf_counter()
    workers = JOBLIB.job_slots({})
    pool, hydra = WarmPool(workers, joblib_env(workers)), InProcessHydra()
    made = time.perf_counter() - t0
    try:
        warmup = warm(pool, hydra, args.preset, 1, out / "warmup")
        times = {}
        for name, steps in (("cold", 1), ("warm", 1), ("cold", args.steps), ("warm", args.steps)):
            folder = out / f"{name}-{steps}"
            run = cold(args.preset, steps, folder) if name == "cold" else warm(pool, hydra, args.preset, steps, folder)
            times[name, steps] = run
            load.append(os.getloadavg()[0])
    finally:
        pool.close()
    print(
        f"{args.preset}, {workers} workers; the pool and this process's Hydra made in {made:.1f} s, its first "
        f"sweep at 1 step (the workers' imports) {warmup:.1f} s; load {' '.join(f'{x:.1f}' for x in load)}"
    )
    for name in ("cold", "warm"):
        one, full = times[name, 1], times[name, args.steps]
        print(f"{name}: 1 step {one:.1f} s, {args.steps} steps {full:.1f} s: {100 * one / full:.1f}%")
    print(f"warm 1 step / cold {args.steps} steps: {100 * times['warm', 1] / times['cold', args.steps]:.1f}%  ({out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
