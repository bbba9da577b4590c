"""Synthetic sweep directories laid out as `lnbench check` leaves them, with known answers: tuning seeds over a
learning-rate grid, judging seeds at the chosen value in looks, judging.json. `lnbench report` judges them as
it judges real ones, so the error rates measured on them are those of the whole tool, files and pages included:

    python -m calibration.synthetic [--sweeps N] [--shape NAME] [--seed S]     # false held, end to end
    tests/claims/test_end_to_end.py                                            # the same, fewer sweeps; -m slow: more

A job's only number is its final validation error, with a validation loss well below the trivial
predictor's (the lines learned) unless the sweep says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from calibration.nulls import SHAPES
from lnbench import report
from lnbench.check.rounds import JUDGING_SEED0, design_record
from lnbench.claims.judge import DESIGN_FILE
from lnbench.claims.plan import JudgingPlan, plan_judging
from lnbench.config.choices import Stage
from lnbench.runs import HYDRA, HYDRA_CONFIG, HYDRA_RECORD, METRICS, OVERRIDES, SUMMARY

LRS = (1e-4, 1e-3, 1e-2)
BASELINE = 2.3  # the trivial predictor's loss


@dataclass
class SyntheticSweep:
    """Two lines' numbers: tune[line] (len(LRS), tuning seeds), judge[line] (judging seeds)."""

    tune: dict[str, np.ndarray]
    judge: dict[str, np.ndarray]
    claims: list[dict[str, Any]]
    looks: list[int] | None = None
    loss: dict[str, float] = field(default_factory=dict)  # final val loss per line (default: learned)
    diverged: dict[str, set[int]] = field(default_factory=dict)  # judging seeds (indices) that diverged
    on_loss: bool = False  # the numbers are the validation loss too (in the trivial predictor's units)
    plan: JudgingPlan | None = None  # judging.json declares this plan (its looks replace `looks`)


def claim(cid: str = "noisy_beats_quiet", better: str = "noisy", than: str = "quiet", **kw: Any) -> dict[str, Any]:
    return {
        "id": cid,
        "text": f"{better} beats {than}",
        "better": better,
        "than": than,
        "metric": "val/error",
        "measure": "final",
        **kw,
    }


def job(
    path: Path,
    model: str,
    seed: int,
    lr: float,
    final: float,
    claims: list,
    *,
    stage: Stage = Stage.tune,
    status: str = "completed",
    loss: float | None = 0.5,
) -> None:
    """One job; loss None: its validation loss is `final` too."""
    loss = final if loss is None else loss
    (path / HYDRA).mkdir(parents=True)
    overrides = [f"model={model}", f"seed={seed}"] + ([f"optim.lr={lr}"] if stage == Stage.tune else [])
    (path / OVERRIDES).write_text(yaml.safe_dump(overrides))
    config = {"seed": seed, "optim": {"lr": lr}, "claims": claims, "tune": ["optim.lr"], "stage": str(stage)}
    (path / HYDRA_CONFIG).write_text(yaml.safe_dump(config))
    (path / HYDRA_RECORD).write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": {"model": model}}}}))
    value = final if status == "completed" else float("nan")
    record = {"step": 10, "split": "val", "time": 1.0, "error": value, "loss": loss}
    (path / METRICS).write_text(json.dumps(record) + "\n")
    summary = {"status": status, "primary_metric": "error", "steps": 10, "baseline": BASELINE, "time_per_step": 0.01}
    if status == "completed":
        summary["final_val"] = {"error": final, "loss": loss}
    (path / SUMMARY).write_text(json.dumps(summary))


def write(root: Path, sweep: SyntheticSweep) -> Path:
    """The sweep's jobs under root (tuning in root/, judging in root/judge-K/), and judging.json."""
    for line, values in sweep.tune.items():
        for i, lr in enumerate(LRS):
            for seed, v in enumerate(values[i]):
                job(root / f"{line}_lr{lr:g}_s{seed}", line, seed, lr, float(v), sweep.claims, loss=_loss(sweep, line))
    chosen = {line: LRS[int(np.argmin(values.mean(-1)))] for line, values in sweep.tune.items()}
    looks = list(sweep.plan.looks) if sweep.plan else sweep.looks or [len(next(iter(sweep.judge.values())))]
    for line, values in sweep.judge.items():
        for k, v in enumerate(values):
            look = next(j for j, n in enumerate(looks) if k < n)
            status = "diverged" if k in sweep.diverged.get(line, ()) else "completed"
            seed = JUDGING_SEED0 + k
            job(
                root / f"judge-{look + 1}" / f"{line}_s{seed}",
                line,
                seed,
                chosen[line],
                float(v),
                sweep.claims,
                stage=Stage.judge,
                status=status,
                loss=_loss(sweep, line),
            )
    if sweep.plan:
        (root / DESIGN_FILE).write_text(json.dumps({**sweep.plan.record(), "first_seed": JUDGING_SEED0}))
    elif sweep.looks:
        (root / DESIGN_FILE).write_text(json.dumps(design_record(sweep.looks)))
    return root


def _loss(sweep: SyntheticSweep, line: str) -> float | None:
    return None if sweep.on_loss else sweep.loss.get(line, 0.5)


def tuned(
    rng: np.random.Generator, lines: tuple[str, ...], seeds: int = 3, spread: float = 0.01
) -> dict[str, np.ndarray]:
    """Tuning values with a clear optimum inside the grid (the middle learning rate), so that the judging
    seeds, not the grid, are what a simulation measures."""
    shape = np.array([0.2, 0.0, 0.2])[:, None]
    return {line: 1.0 + shape + spread * rng.normal(size=(len(LRS), seeds)) for line in lines}


def null_sweep(
    rng: np.random.Generator, shape: str, plan: JudgingPlan, scale: float = 0.01, p: float = 0.5
) -> SyntheticSweep:
    """One sweep of a null of the declared estimand: `noisy` beats `quiet` on a share p of the judging seeds
    (P(d > 0) = 1/2 by default: the claim `noisy beats quiet` is false, any held a false one), d drawn from a
    shape of calibration/nulls.py, in units of `scale` around an error of 1, with a seed effect both lines
    share. Where the shape's runs diverge, the sweep's jobs diverge."""
    n = plan.max_seeds
    lo, hi = SHAPES[shape].above(rng, n, p)
    quiet = 1.0 + scale * (rng.normal(size=n) + rng.normal(size=n))
    d = np.where(np.isfinite(lo), lo, 0.0)
    judge = {"quiet": quiet, "noisy": quiet - scale * d}
    diverged = {"quiet": {i for i in range(n) if hi[i] == np.inf}, "noisy": {i for i in range(n) if lo[i] == -np.inf}}
    return SyntheticSweep(tuned(rng, ("quiet", "noisy")), judge, [claim()], diverged=diverged, plan=plan)


def judged(root: Path, *argv: str) -> list[dict[str, Any]]:
    """`lnbench report ROOT` (its files written, its terminal output swallowed): the claims.json it wrote."""
    with contextlib.redirect_stdout(io.StringIO()):
        code = report.main([str(root), *argv])
    if code != 0:
        raise RuntimeError(f"lnbench report {root} exited {code}")
    return json.loads((root / report.OUT_DIR / "claims.json").read_text())


def false_held(sweeps: int, shape: str, plan: JudgingPlan | None = None, seed: int = 0) -> tuple[int, int]:
    """(false helds, sweeps) of the shape's null, each sweep written and judged by `lnbench report`."""
    rng = np.random.default_rng(seed)
    plan = plan or plan_judging(family_size=1)
    held = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(sweeps):
            root = write(Path(tmp) / f"s{i}", null_sweep(rng, shape, plan))
            held += judged(root)[0]["verdict"] == "held"
    return held, sweeps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.synthetic", description=__doc__.split("\n\n")[0])
    p.add_argument("--sweeps", type=int, default=400)
    p.add_argument("--shape", action="append", choices=list(SHAPES), help="the seeds' shape (default: a few)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    plan = plan_judging(family_size=1)
    for shape in args.shape or ["skewed 5x", "catastrophe 10%", "diverged"]:
        held, n = false_held(args.sweeps, shape, plan, args.seed)
        print(f"{shape}, P(d > 0) = 1/2, {plan.summary()}: {held} of {n} sweeps read held ({held / n:.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
