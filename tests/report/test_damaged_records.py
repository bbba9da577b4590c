"""Every record lnbench writes and later reads back, damaged (cut off, of another type, not JSON/YAML at all,
empty): the record is refused (judging.json: `lnbench report` and `lnbench check` exit 2 with one paragraph naming
it) or its run is named unreadable with the file and what is wrong (a run's summary.json and `.hydra/` record:
the report and `lnbench status` list it, its values never read as if absent); never a traceback, never read
another way in silence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.synthetic import SyntheticSweep, claim, write
from lnbench import report
from lnbench.check import cli as check
from lnbench.claims.judge import DESIGN_FILE
from lnbench.launch.sweep import status
from lnbench.runs import HYDRA_CONFIG, HYDRA_RECORD, MULTIRUN, OVERRIDES, SUMMARY, load_runs

JOB = "judge-1/a_s1001"  # a judging run of the synthetic sweep
WRONG_TYPE = {  # valid JSON/YAML, of another shape than lnbench or Hydra writes
    DESIGN_FILE: json.dumps({"planned": True, "claims": {"a_beats_b": {"looks": "3, 6"}}}),
    SUMMARY: json.dumps({"status": "completed", "final_val": 0.5}),
    OVERRIDES: "model: a\n",
    HYDRA_CONFIG: "- seed\n",
    HYDRA_RECORD: "hydra:\n  runtime:\n    choices: [a]\n",
    MULTIRUN: "- 1\n",
    ".check.json": json.dumps({"command": "lnbench check ln_gain_init"}),  # lnbench check's record in its --out
}
DAMAGES = ["cut off", "wrong type", "not JSON or YAML", "empty"]


def sweep(root: Path) -> Path:
    rng = np.random.default_rng(0)
    tune = {line: 1.0 + 0.01 * rng.normal(size=(3, 1)) for line in "ab"}  # few jobs: the test reads them often
    write(
        root,
        SyntheticSweep(tune, {"a": 1.0 - 0.01 * np.arange(2), "b": np.ones(2)}, [claim("a_beats_b", "a", "b")], [2]),
    )
    (root / MULTIRUN).write_text("hydra:\n  overrides:\n    task: [seed=0,1,2]\n")
    return root


def damage(path: Path, how: str) -> None:
    text = path.read_text()
    cut = len(text) // 2 + (text[len(text) // 2 - 1] == "\n")  # mid-line: YAML cut at a line's end may still parse
    path.write_text(
        {
            "cut off": text[:cut],
            "wrong type": next(v for k, v in WRONG_TYPE.items() if path.as_posix().endswith(k)),
            "not JSON or YAML": "{[: \x07 nonsense",
            "empty": "",
        }[how]
    )


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", [SUMMARY, OVERRIDES, HYDRA_CONFIG, HYDRA_RECORD])
def test_a_damaged_run_record_names_its_run_unreadable_in_the_report_and_status(tmp_path, name, how):
    root = sweep(tmp_path)
    path = root / JOB / name
    damage(path, how)
    runs = {r.name: r for r in load_runs(root)}
    run = runs[JOB]
    assert run.status == "unreadable" and str(path) in run.summary["error"]
    assert [r.name for r in runs.values() if r.status != "completed"] == [JOB]  # the others read as they were
    said = [line for line in status.lines(root) if line.startswith("  unreadable")]
    assert len(said) == 1 and JOB in said[0] and str(path) in said[0]
    if name != SUMMARY:  # its values unknown: set aside, never judged as a run of the defaults
        rep = report.make_report(root, list(runs.values()), {}, x_axes=())
        assert run in rep.aside and all(run not in g.runs + g.judging for g in rep.groups)


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_design_is_refused_by_report_and_check_never_judged_in_one_look(tmp_path, capsys, how):
    root = sweep(tmp_path / "ln_gain_init")
    damage(root / DESIGN_FILE, how)
    assert report.main([str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"lnbench: error: {root / DESIGN_FILE} ") and len(err.splitlines()) == 1
    assert not (root / report.OUT_DIR).exists()
    with pytest.raises(check.CheckError, match=str(root / DESIGN_FILE)):
        check.check_design(check.parse_args(["ln_gain_init", "--out", str(tmp_path), "--judging-seeds", "3"]))


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_sweep_record_is_named_by_status(tmp_path, how):
    root = sweep(tmp_path)
    damage(root / MULTIRUN, how)
    said = [line for line in status.lines(root) if line.startswith("  unreadable")]
    assert len(said) == 1 and said[0].startswith(f"  unreadable {root / MULTIRUN} ")
    assert said[0].endswith("its pending jobs are not counted")


@pytest.mark.parametrize(
    "held", [[1, 2], {"step": 3}, {"config": "x", "step": 3, "model": {}}, {"config": {}, "step": "3"}]
)
def test_a_checkpoint_of_another_shape_is_refused_by_name_not_a_traceback(tmp_path, held):
    import torch

    from lnbench.errors import DataError
    from lnbench.runs import CHECKPOINT
    from lnbench.training import checkpoint

    torch.save(held, tmp_path / CHECKPOINT)
    with pytest.raises(DataError, match=f"{tmp_path / CHECKPOINT} is not an lnbench checkpoint: it holds"):
        checkpoint.load(tmp_path, {})


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_check_record_is_named_by_status(tmp_path, how):
    root = sweep(tmp_path)
    (root / ".check.json").write_text(json.dumps({"command": ["x"], "presets": [], "pid": 1, "host": "h"}) + "\n")
    damage(root / ".check.json", how)
    said = [line for line in status.lines(root) if line.startswith("  unreadable")]
    assert said == [f"  unreadable {root / '.check.json'}: not the record lnbench check writes (its command unknown)"]
