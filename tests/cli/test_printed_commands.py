"""What lnbench prints for a person to read or paste (issue 40): the next commands paste into a shell as they are,
paths with spaces included, and a sweep's job keeps its label as other jobs appear."""

import shlex
import signal

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from lnbench.errors import Interrupted
from lnbench.launch.sweep import status
from lnbench.launch.sweep.end import end_of_sweep_block
from lnbench.launch.sweep.stop import message
from lnbench.training.tracker import end_of_run_block
from tests.report.test_report import make_job


def command_in(line: str) -> list[str]:
    """The shell words of the command a line ends with (after its label), as a shell splits them."""
    text = line.split("`")[1] if "`" in line else line.split(None, 1)[1]
    return shlex.split(text)


def test_the_next_commands_paste_into_a_shell_with_spaces_in_the_path(tmp_path):
    run = tmp_path / "my runs" / "it's here"
    done = end_of_run_block({"status": "completed", "steps": 2, "wall_time": 1.0}, run, "mse").splitlines()[-1]
    assert command_in(done) == ["lnbench", "report", str(run)]
    again = end_of_run_block({"status": "interrupted", "steps": 2, "wall_time": 1.0}, run, "mse").splitlines()[-1]
    assert command_in(again) == ["lnbench", "train", f"resume={run}"]
    said = str(Interrupted(signal.SIGTERM, 3, run))
    assert command_in(said.split("continue with ", 1)[1]) == ["lnbench", "train", f"resume={run}"]


def test_a_sweeps_continue_and_resume_commands_give_hydra_the_directory_back(tmp_path):
    sweep = tmp_path / "my sweeps" / "one"
    make_job(sweep, 0, ["seed=0"], status="interrupted")
    block = end_of_sweep_block(sweep, {"0": {"status": "interrupted"}}).splitlines()
    assert command_in(block[-1]) == ["lnbench", "report", str(sweep)]
    (arg,) = shlex.split(next(ln for ln in block if ln.startswith("  continue")).split("with ", 1)[1].split(":")[0])
    said = message(sweep, signal.SIGINT, ["-m", "seed=0,1"])
    words = shlex.split(said.split("`")[1])
    assert words[:4] == ["lnbench", "train", "-m", "seed=0,1"] and words[4] == arg
    (parsed,) = OverridesParser.create().parse_overrides([arg])  # Hydra reads the directory back whole
    assert parsed.key_or_group == "hydra.sweep.dir" and parsed.value() == str(sweep)


def test_a_jobs_label_does_not_change_as_other_jobs_appear(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    hydra = {"sweeper": {"params": {"model": "mlp,ln_mlp"}}, "overrides": {"task": ["seed=0,1", "steps=5"]}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    make_job(sweep, 0, ["model=mlp", "seed=0", "steps=5"])
    first = status.jobs_in(sweep, 0.0)
    assert status.label(first[0], first) == "0 (model=mlp seed=0)"  # alone, it already names both swept keys
    make_job(sweep, 1, ["model=mlp", "seed=1", "steps=5"])
    make_job(sweep, 2, ["model=ln_mlp", "seed=0", "steps=5"])
    later = status.jobs_in(sweep, 0.0)
    assert [status.label(j, later) for j in later] == [
        "0 (model=mlp seed=0)",
        "1 (model=mlp seed=1)",
        "2 (model=ln_mlp seed=0)",
    ]
