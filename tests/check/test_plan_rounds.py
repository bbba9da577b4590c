"""lnbench check's rounds of a preset (lnbench.check.preset), driven here by a runner that writes the runs a round
asks for (synthetic numbers, calibration.synthetic's layout): widening goes on while a compared line's winner
sits at its grid's edge, up to --widen; a claim an edge still blocks gets no judging seed; the judging plan is in
judging.json before the first judging seed, within the budget, and a rerun keeps it."""

from __future__ import annotations

import heapq
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibration.synthetic import LRS, SyntheticSweep, claim, job, write
from lnbench.check import cli as check
from lnbench.check import preset, rounds
from lnbench.check.budget import Budget, parse_budget
from lnbench.check.preset import PresetCheck
from lnbench.claims.judge import DESIGN_FILE
from lnbench.config.presets import read_experiment

CLAIMS = [claim("a_beats_b", "a", "b"), claim("c_beats_a", "c", "a")]
WALL_S = 2.0


def error(line: str, lr: float, seed: int) -> float:
    """b gets better the larger its learning rate (its winner is always the top of its grid); a and c are best
    at 1e-3; c is better than a."""
    if line == "b":
        return 1.0 - 0.1 * math.log10(lr) + 0.001 * seed
    return {"a": 1.0, "c": 0.9}[line] + 0.1 * abs(math.log10(lr) + 3) + 0.001 * seed


def tuning_sweep(root: Path, claims: list = CLAIMS) -> None:
    tune = {line: np.array([[error(line, lr, s) for s in range(3)] for lr in LRS]) for line in "abc"}
    write(root, SyntheticSweep(tune, {"a": np.zeros(0)}, claims))
    timed(root)


def timed(root: Path, wall_s: float = WALL_S) -> None:
    for path in root.rglob("summary.json"):
        summary = json.loads(path.read_text())
        path.write_text(json.dumps({**summary, "wall_time": wall_s}))


class Runner:
    """Runs a round as the check's runner would, by writing each job's run (its cell's values, its seed), and
    notes what each round asked for and whether judging.json existed then."""

    def __init__(self, root: Path, claims: list = CLAIMS):
        self.root, self.rounds, self.claims = root, [], claims
        self.ended = lambda name: None  # told each round's name once it has run
        self.cut = ""  # a round the pool cuts short (the budget ran out in it): only its first cell runs

    def drive(self, check_: PresetCheck):
        steps = check_.rounds()
        sweeps = next(steps)
        try:
            while True:
                for args in sweeps:
                    self.run(args)
                sweeps = steps.send([0] * len(sweeps))
        except StopIteration as end:
            return end.value

    def run(self, args: list[str]) -> None:
        given = dict(a.split("=", 1) for a in args if "=" in a)
        folder = Path(given["hydra.sweep.dir"])
        name = folder.name if folder != self.root else "tune"
        self.rounds.append((name, given.get("+cell", ""), (self.root / DESIGN_FILE).is_file()))
        if folder == self.root:
            return self.ended(name)  # the tuning sweep's runs are there already
        for cell in given["+cell"].split(",")[: 1 if name == self.cut else None]:
            values = yaml.safe_load((self.root / rounds.CELLS / "cell" / f"{cell}.yaml").read_text())
            line, lr = values["defaults"][0]["override /model"], values["optim"]["lr"]
            for seed in map(int, given["seed"].split(",")):
                value = error(line, lr, seed) if values["stage"] == "widen" else error(line, lr, 0) - 0.01 * seed
                job(folder / f"{cell}_s{seed}", line, seed, lr, value, self.claims, stage=values["stage"])
        timed(folder)
        self.ended(name)


def preset_check(root: Path, budget: Budget, *argv: str) -> PresetCheck:
    args = check.parse_args(["ln_gain_init", *argv])
    pc = PresetCheck(args, "ln_gain_init", budget)
    pc.directory = root
    pc.base = ["-m", "+experiment=ln_gain_init", f"hydra.sweep.dir={root}"]
    return pc


def test_widening_goes_on_at_an_edge_up_to_its_budget_and_an_edge_blocks_judging_seeds(tmp_path):
    tuning_sweep(tmp_path)
    runner = Runner(tmp_path)
    outcome = runner.drive(preset_check(tmp_path, Budget(None), "--budget", "none"))
    names = [name for name, _, _ in runner.rounds]
    assert names[:4] == ["tune", "widen-1", "widen-2", "widen-3"]  # b's winner stays at the top: 3 values added
    assert all(
        "_b_" not in cells and not cells.startswith("b_") for n, cells, _ in runner.rounds if n.startswith("judge")
    )
    judged = [(n, cells, design) for n, cells, design in runner.rounds if n.startswith("judge")]
    assert judged and all(design for _, _, design in judged)  # judging.json came before the first judging seed
    assert {c.split("_lr")[0] for _, cells, _ in judged for c in cells.split(",")} == {"a", "c"}
    declared = json.loads((tmp_path / DESIGN_FILE).read_text())
    assert set(declared["claims"]) == {"c_beats_a"} and "grid edge: b" in declared["blocked"]["a_beats_b"]
    assert declared["rounds"] == declared["claims"]["c_beats_a"]["looks"] and declared["planned"] is True
    verdicts = {d["id"]: d for d in outcome.verdicts}
    assert verdicts["a_beats_b"]["verdict"] == "inconclusive" and "grid edge" in verdicts["a_beats_b"]["reason"]
    assert outcome.added["widen"] == 9 and outcome.added["judge"] > 0


def test_a_claim_planned_to_look_later_gets_its_seeds_after_a_sooner_claims_round(tmp_path):
    # Two declared claims on the same lines: the primary one (a family of 23) first looks at more seeds than the
    # control (a family of 4). The control's first round decides it; the primary one, short of its first look
    # then, still gets its seeds (it was dropped once: every primary claim of a full check stayed at "n<14").
    primary, control = "pmnist.ln_lstm_beats_lstm", "batch_size.ln_beats_bn_at_64"
    claims = [claim(primary, "c", "a", family="primary"), claim(control, "c", "a", family="control")]
    tuning_sweep(tmp_path, claims)
    outcome = Runner(tmp_path, claims).drive(preset_check(tmp_path, Budget(None), "--budget", "none"))
    plans = json.loads((tmp_path / DESIGN_FILE).read_text())["claims"]
    assert plans[control]["looks"][0] < plans[primary]["looks"][0]
    verdicts = {d["id"]: d for d in outcome.verdicts}
    assert verdicts[control]["verdict"] == "held" and verdicts[control]["decided_at"] == plans[control]["looks"][0]
    assert verdicts[primary]["raw_verdict"] == "held" and verdicts[primary]["awaiting_seeds"] is False
    assert verdicts[primary]["decided_at"] == plans[primary]["looks"][0]


def test_a_rerun_keeps_the_declared_plan_whatever_the_budget_says_now(tmp_path):
    tuning_sweep(tmp_path)
    Runner(tmp_path).drive(preset_check(tmp_path, Budget(None), "--budget", "none"))
    before = (tmp_path / DESIGN_FILE).read_text()
    again = Runner(tmp_path)
    again.drive(preset_check(tmp_path, Budget(60.0, "1m"), "--budget", "1m"))
    assert (tmp_path / DESIGN_FILE).read_text() == before
    assert not [n for n, _, _ in again.rounds if n.startswith("judge")]  # every planned seed had run


class Drives:
    """The check's runner, standing in: each preset's rounds driven by Runner (no process, no Hydra)."""

    overlapping = False

    def queued_s(self) -> float:
        return 0.0

    def run(self, checks, done, budget) -> None:
        for c in checks:
            done(Runner(c.directory).drive(c))


def test_a_rerun_with_other_options_exits_0_and_its_page_shows_the_design_that_decided(tmp_path, monkeypatch, capsys):
    tuning_sweep(tmp_path / "ln_gain_init")
    monkeypatch.setattr(check, "check_overrides", lambda args: None)  # Hydra's composition: not what is tested
    monkeypatch.setattr(check, "make_runner", lambda args: (Drives(), 2))
    out = ["ln_gain_init", "--out", str(tmp_path)]
    assert check.main([*out, "--budget", "none", "--widen", "2", "--max-seeds", "6"]) == 0
    declared = (tmp_path / "ln_gain_init" / DESIGN_FILE).read_text()
    first = (tmp_path / "check.md").read_text()
    capsys.readouterr()
    assert check.main([*out, "--budget", "1m", "--widen", "0", "--max-seeds", "9"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert (tmp_path / "ln_gain_init" / DESIGN_FILE).read_text() == declared
    assert len(err) == 2 and err[0].startswith("lnbench check: --widen 0 is not applied to ln_gain_init")
    assert "declared under a plan per claim, --max-seeds 6" in err[1] and "another --out" in err[1]
    page = (tmp_path / "check.md").read_text()
    design = "widened up to 2 value(s); judging seeds planned per claim for its test's power at its family's level"
    assert design in first and design in page  # the design that decided, not this invocation's --widen
    assert page.split("| claim |")[1] == first.split("| claim |")[1]  # the same verdicts, seeds and values


def test_a_plan_is_the_claims_whatever_the_presets_beside_it():
    # nothing else reaches it: plan_judging takes no job cost and no budget, and the check passes it none
    alone = preset.claim_plans(preset.claimlib.claims_of([read_experiment("pmnist")]))
    every = preset.claim_plans(preset.claimlib.claims_of(read_experiment(p) for p in check.claim_presets()))
    assert alone == {cid: every[cid] for cid in alone}  # the same plan beside every other preset
    assert {cid: p.max_seeds for cid, p in alone.items()} == {
        "pmnist.ln_lstm_beats_lstm": 21,  # primary (23)
        "pmnist.bn_lstm_beats_lstm": 20,  # beyond (9)
        "pmnist.ln_faster_than_bn": 21,
    }


class Clock:
    """The budget of a stand-in check: it runs out once the runner has run the round named."""

    def __init__(self, runner: Runner, budget: Budget, after: str):
        self.runner, self.budget, self.after = runner, budget, after
        runner.ended = self.ended

    def ended(self, name: str) -> None:
        if name == self.after:
            self.budget.start -= self.budget.seconds  # the budget has run out during this round


@pytest.mark.parametrize(
    "after,cut",
    [
        pytest.param("tune", False, marks=pytest.mark.slow),
        pytest.param("judge-1", False, marks=pytest.mark.slow),
        ("judge-1", True),  # the default suite's case: the pool cut the round the budget ran out in
    ],
)
def test_a_budget_stops_between_rounds_every_open_claim_awaits_its_seeds_and_a_rerun_finishes_the_same_plan(
    tmp_path, after, cut, capsys
):
    primary, control = "pmnist.ln_lstm_beats_lstm", "batch_size.ln_beats_bn_at_64"
    claims = [claim(primary, "c", "a", family="primary"), claim(control, "c", "a", family="control")]
    tuning_sweep(tmp_path, claims)
    budget = Budget(60.0, "1m")
    runner = Runner(tmp_path, claims)
    Clock(runner, budget, after)
    runner.cut = after if cut else ""
    stopped = runner.drive(preset_check(tmp_path, budget, "--budget", "1m"))
    names = [n for n, _, _ in runner.rounds]
    assert names[-1] == after  # no round after the one the budget ran out in
    verdicts = {d["id"]: d for d in stopped.verdicts}
    # the control is decided at its first look; where the pool cut that round short, nothing is decided
    opened = [primary] if after == "judge-1" and not cut else [primary, control]
    for cid in opened:
        d = verdicts[cid]
        assert d["verdict"] == d["raw_verdict"] == "inconclusive" and d["awaiting_seeds"] is True
        assert "--budget 1m ran out" in d["raw_reason"] and d["planned_looks"] and d["max_seeds"] in (15, 21)
        assert "rests" not in d["raw_reason"] and d["effect"] is None  # never judged on the tuning seeds
    if cut:  # the preset's own report, under its declared plan, awaits them too: never judged on tuning seeds
        own = preset.judge_preset(check.parse_args(["ln_gain_init"]), tmp_path, figures=False).verdicts
        assert all(d["awaiting_seeds"] and not d["note"] and d["raw_reason"].startswith("n<") for d in own)
    if after == "judge-1" and not cut:
        assert verdicts[control]["verdict"] == "held" and verdicts[control]["decided_at"] == 10
    assert "stopped" in stopped.note and "--budget 1m" in stopped.note and "judging jobs" in stopped.note
    assert "here on 1 worker(s)" in stopped.note and "an estimate" in stopped.note
    assert "lnbench check: ln_gain_init stopped" in capsys.readouterr().out
    args = check.parse_args(["ln_gain_init", "--out", str(tmp_path / "page")])
    page = check.write_page([stopped], args, 60.0)
    assert page.count("--budget 1m ran out") >= len(opened) + 1 and "planned MDE P(d > margin) 0.89" in page
    declared = (tmp_path / DESIGN_FILE).read_text() if (tmp_path / DESIGN_FILE).is_file() else None
    again = Runner(tmp_path, claims)
    finished = again.drive(preset_check(tmp_path, Budget(None)))
    plans = json.loads((tmp_path / DESIGN_FILE).read_text())
    assert declared is None or (tmp_path / DESIGN_FILE).read_text() == declared  # the declared plan, kept
    assert (
        plans["claims"][primary]
        == preset.claim_plans([preset.claimlib.parse_claim(c) for c in claims])[primary].record()
    )
    done = {d["id"]: d for d in finished.verdicts}
    assert done[primary]["verdict"] == "held" and done[primary]["decided_at"] == 14 and not finished.note
    assert done[control]["verdict"] == "held" and done[control]["decided_at"] == 10


def test_the_check_says_how_it_read_the_budget_and_what_the_plan_will_take_here(tmp_path):
    assert Budget(90.0, "90").read_as().startswith("--budget 90 read as 90 seconds (1.5 min) of wall time")
    args = check.parse_args(["ln_gain_init", "--out", str(tmp_path), "--budget", "90"])
    assert args.budget_s == 90 and check.parse_args(["ln_gain_init"]).budget_s is None  # the default: no limit
    lines = check.plan_estimate([PresetCheck(args, "ln_gain_init", Budget(90.0, "90"))], 2)
    assert "an estimate" in lines[0] and "on 2 worker(s)" in lines[0]
    assert "ln_gain_init: 18 tuning and up to 42 judging jobs" in lines[1] and "a default" in lines[1]
    assert "up to 21 judging seeds in looks 14, 21" in lines[2]


@pytest.mark.parametrize(
    "text,seconds", [("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("5400s", 5400), ("5400", 5400)]
)
def test_a_budget_is_a_duration(text, seconds):
    assert parse_budget(text) == seconds and parse_budget("none") is None


@pytest.mark.parametrize("text", ["soon", "0", "0m", "90x", "inf", "1h30"])
def test_a_bad_budget_is_one_paragraph_exit_2_and_nothing_written(text, tmp_path, capsys):
    assert check.main(["ln_gain_init", "--budget", text, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"lnbench: error: --budget {text!r} is not allowed") and "90m, 2h" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_looks_by_hand_are_declared_and_a_rerun_with_the_same_looks_goes_on(tmp_path):
    tuning_sweep(tmp_path)
    Runner(tmp_path).drive(preset_check(tmp_path, Budget(None), "--judging-seeds", "3", "--max-seeds", "6"))
    declared = json.loads((tmp_path / DESIGN_FILE).read_text())
    assert declared["planned"] is False and declared["looks"] == [3, 6] and set(declared["claims"]) == {"c_beats_a"}
    args = check.parse_args(["ln_gain_init", "--judging-seeds", "3", "--max-seeds", "6", "--out", str(tmp_path)])
    (tmp_path / "ln_gain_init").mkdir()
    (tmp_path / "ln_gain_init" / DESIGN_FILE).write_text(json.dumps(declared))
    check.check_design(args)  # the same looks: no refusal, nothing said
    assert check.kept_design(args) == []
    for other in (["--judging-seeds", "3"], [], ["--judging-seeds", "0"]):  # other looks, a plan, none: kept
        said = check.kept_design(check.parse_args(["ln_gain_init", *other, "--out", str(tmp_path)]))
        assert len(said) == 1 and said[0].startswith("--judging-seeds ")
        assert "declared under looks of [3, 6] judging seeds" in said[0] and "another --out" in said[0]


@pytest.mark.parametrize("given", [["--judging-seeds", "3"], ["--judging-seeds", "0"], ["--max-seeds", "9"]])
def test_a_rerun_keeps_a_declared_plan_and_says_which_option_it_does_not_apply(tmp_path, given):
    (tmp_path / "pmnist").mkdir()
    declared = {"planned": True, "claims": {}, "rounds": [], "options": {"widen": 3, "max_seeds": None}}
    (tmp_path / "pmnist" / DESIGN_FILE).write_text(json.dumps(declared))
    args = check.parse_args(["pmnist", "--out", str(tmp_path), *given])
    check.check_design(args)
    said = check.kept_design(args)
    assert len(said) == 1 and said[0].startswith(f"{given[0]} {given[1]} is not applied to pmnist")
    assert "declared under a plan per claim" in said[0]


def test_a_round_runs_seed_by_seed_across_its_cells_so_a_cut_round_leaves_whole_pairs():
    from lnbench.check.runner import Active, PoolRunner

    class Listed:  # a round's sweep as Hydra lists it: cell by cell
        jobs = [(i, [f"+cell={c}", f"seed={s}"]) for i, (c, s) in enumerate((c, s) for c in "ab" for s in (1000, 1001))]

    runner, active = PoolRunner(2, {}), Active(None, None, 0, [Listed()])
    assert runner._enqueue(active) == 4
    order = [heapq.heappop(runner.queue).overrides for _ in range(4)]
    assert [o[1] for o in order] == ["seed=1000", "seed=1000", "seed=1001", "seed=1001"]
