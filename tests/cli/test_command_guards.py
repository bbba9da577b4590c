"""Every command is as well guarded as `train` (issue 24): `lnbench report`, `lnbench check` and `lnbench
presets` refuse bad input with one paragraph on stderr naming the value and what is allowed, exit 2, no
traceback, and leave every file as it was (a report is never half old, half new)."""

import errno
from pathlib import Path

import pytest

from lnbench.claims import judge
from lnbench.cli import main
from tests.cli.test_hardening import snapshot
from tests.report.test_report import make_job


def refused(argv, capsys) -> str:
    """`lnbench <argv>` in this process: exit 2 and one line on stderr, `lnbench: error: ...` (README)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("lnbench: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def tree(tmp_path):
    """A sweep of two models x two seeds with the report of an earlier invocation, an empty folder, a file."""
    sweep = tmp_path / "sweep"
    for num, (model, seed) in enumerate([(m, s) for m in ("mlp", "ln_mlp") for s in (0, 1)]):
        make_job(sweep, num, [f"model={model}", f"seed={seed}"])
    (sweep / "report").mkdir()
    for name in ("report.md", "report.html", "claims.json"):
        (sweep / "report" / name).write_text("the earlier report\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("not a directory\n")
    return tmp_path


# (arguments after `lnbench report`, with {t} for the tree; what the paragraph must say)
BAD_REPORT = {
    "missing-dir": (["{t}/nowhere"], ["DIR {t}/nowhere does not exist", "give a run directory or a sweep directory"]),
    "dir-is-a-file": (["{t}/file.txt"], ["DIR {t}/file.txt is a file, not a directory"]),
    "no-runs": (["{t}/empty"], ["no runs under {t}/empty", "give the directory of a run, a sweep or a folder of runs"]),
    "no-dir": ([], ["the following arguments are required: DIR", "lnbench report --help"]),
    "two-dirs-no-out": (
        ["{t}/sweep", "{t}/sweep"],
        ["2 directories are compared: say where the report goes with --out DIR"],
    ),
    "unknown-option": (["{t}/sweep", "--colour"], ["unrecognized arguments: --colour"]),
    "lines-no-value": (["{t}/sweep", "--lines"], ["argument --lines: expected one argument"]),
    "lines-unknown": (
        ["{t}/sweep", "--lines", "modle"],
        ["--lines 'modle' is no config key", "Keys that vary between them: model, seed", "did you mean model"],
    ),
    "lines-empty": (["{t}/sweep", "--lines", ""], ["--lines '' is no config key"]),
    "panels-unknown": (
        ["{t}/sweep", "--panels", "dataset.batchsize"],
        ["--panels 'dataset.batchsize' is no config key", "did you mean dataset.batch_size"],
    ),
    "panels-empty-item": (["{t}/sweep", "--panels", "model,"], ["--panels '' is no config key"]),
    "tune-unknown": (["{t}/sweep", "--tune", "optim.learning_rate"], ["--tune 'optim.learning_rate' is no config key"]),
    "target-not-a-number": (
        ["{t}/sweep", "--target", "error=low"],
        ["--target 'error=low' is not METRIC=NUMBER", "--target error=0.05"],
    ),
    "target-not-finite": (
        ["{t}/sweep", "--target", "error=nan"],
        ["--target 'error=nan' is not METRIC=NUMBER with a finite number"],
    ),
    "target-unlogged": (
        ["{t}/sweep", "--target", "accuracy=0.9"],
        ["--target 'accuracy': no run logged a validation accuracy", "Metrics they logged: error, loss"],
    ),
    "target-below-every-metric": (
        ["{t}/sweep", "--target", "mse=-1"],
        ["--target 'mse=-1' can never be reached", "Give a number >= 0"],
    ),
    "tune-not-swept": (
        ["{t}/sweep", "--tune", "dataset.batch_size"],
        [
            "--tune 'dataset.batch_size' is not allowed: these runs did not sweep it (every run has "
            "dataset.batch_size=128)",
            "Keys that vary between them: model, seed",
        ],
    ),
    "adjust-unknown": (
        ["{t}/sweep", "--adjust", "bonf"],
        ["--adjust 'bonf' is not allowed: use bonferroni (", "holm (", "bh (", "none ("],
    ),
    "out-is-a-file": (
        ["{t}/sweep", "--out", "{t}/file.txt"],
        ["--out {t}/file.txt cannot be written: {t}/file.txt is a file"],
    ),
    "out-under-a-file": (
        ["{t}/sweep", "--out", "{t}/file.txt/report"],
        ["--out {t}/file.txt/report cannot be written: {t}/file.txt is a file"],
    ),
}


@pytest.mark.parametrize("args,says", BAD_REPORT.values(), ids=BAD_REPORT.keys())
def test_bad_report_input_is_one_paragraph_exit_2_and_nothing_written(tree, args, says, capsys):
    before = snapshot(tree)
    line = refused(["report", *(a.format(t=tree) for a in args)], capsys)
    for text in says:
        assert text.format(t=tree) in line
    assert snapshot(tree) == before


def test_an_unwritable_default_report_directory_is_refused_before_the_report_is_made(tree, capsys, monkeypatch):
    import lnbench.report.cli as report_cli

    monkeypatch.setattr(report_cli, "unwritable", lambda out: f"{out} is not writable by you")
    monkeypatch.setattr(
        report_cli, "make_report", lambda *a, **k: pytest.fail("the report was made before --out was checked")
    )
    line = refused(["report", str(tree / "sweep")], capsys)
    assert f"the report's directory {tree / 'sweep' / 'report'} (the default, DIR/report) cannot be written" in line
    assert "--out DIR" in line


def test_a_write_that_fails_half_way_replaces_no_file_of_the_report(tree, capsys, monkeypatch):
    before = snapshot(tree)
    real = Path.write_bytes

    def full_disk(self, data):
        if ".report.html." in self.name:  # the temp file of the second page: report.md's is already written
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full_disk)
    line = refused(["report", str(tree / "sweep")], capsys)
    assert f"could not be written to {tree / 'sweep' / 'report'}: No space left on device" in line
    assert snapshot(tree) == before  # the earlier report, whole; no temp file left


def test_report_help_is_exit_0(capsys):
    assert main(["report", "--help"]) == 0
    assert "usage: lnbench report" in capsys.readouterr().out


# ---- lnbench check --------------------------------------------------------------------------------
BAD_CHECK = {
    "out-without-value": (["--out"], ["--out needs a directory, e.g. --out outputs/check; it was given none"]),
    "option-without-value": (["--judging-seeds"], ["--judging-seeds needs a value"]),
    "option-as-a-value": (
        ["--out", "--widen", "2"],
        ["--out needs a directory, e.g. --out outputs/check; it was given '--widen', another option"],
    ),
    "unknown-option": (
        ["--colour=red"],
        ["option '--colour' is not allowed: use --out, --judging-seeds, --max-seeds, --widen, --adjust"],
    ),
    "override-typo": (
        ["pmnist", "optim.lrr=3", "--out", "{t}/fresh"],
        ["optim.lrr=3 is not allowed: AdamConfig has no key 'lrr'", "(with the sweep of pmnist)"],
    ),
    "scale-infinite": (["scale=inf"], ["scale=inf is not allowed: scale must be a finite number > 0"]),
    "scale-without-value": (["scale"], ["scale is not allowed: scale must be a finite number > 0"]),
    "out-is-a-file": (
        ["pmnist", "--out", "{t}/file.txt"],
        ["--out {t}/file.txt cannot be written: {t}/file.txt is a file"],
    ),
    "design-unreadable": (
        ["pmnist", "--out", "{t}/check"],
        ["{t}/check/pmnist/judging.json is not JSON, cut off or damaged"],
    ),
    # issue 32: values are validated before the first job, and an --out the file system refuses is refused
    "override-bad-value": (
        ["ln_gain_init", "optim.lr=-3", "--out", "{t}/fresh"],
        ["optim.lr=-3.0 is not allowed: the learning rate must be > 0", "(with the sweep of ln_gain_init)"],
    ),
    "override-bad-value-swept": (
        ["ln_gain_init", "model.norm.gain_init=1.0,-inf", "--out", "{t}/fresh"],
        ["model.norm.gain_init=-inf is not allowed: it must be a finite number"],
    ),
    "out-refused-by-the-file-system": (
        ["ln_gain_init", "--out", "/proc/nope"],
        ["--out /proc/nope cannot be written: /proc refuses new files"],
    ),
    "preset-misspelt": (["ln_gain_int"], ["preset 'ln_gain_int' is not a claim preset (did you mean ln_gain_init?)"]),
}


@pytest.mark.parametrize("args,says", BAD_CHECK.values(), ids=BAD_CHECK.keys())
def test_bad_check_input_is_one_paragraph_exit_2_and_nothing_written(tree, args, says, capsys, monkeypatch):
    monkeypatch.chdir(tree)  # the default --out (outputs/check) would be here
    (tree / "check" / "pmnist").mkdir(parents=True)
    (tree / "check" / "pmnist" / judge.DESIGN_FILE).write_text('{"looks": [3, 6')  # torn
    before = snapshot(tree)
    line = refused(["check", *(a.format(t=tree) for a in args)], capsys)
    for text in says:
        assert text.format(t=tree) in line
    assert snapshot(tree) == before


def test_an_override_that_replaces_a_presets_swept_axis_is_said(capsys):
    from lnbench.check import cli as check

    args = check.parse_args(["ln_gain_init", "pmnist", "optim.lr=1e-3", "seed=0,1"])
    lines = check.replaced_axes(args)
    assert lines[0] == (
        "optim.lr=1e-3 seed=0,1 replace ln_gain_init's swept optim.lr=0.01,0.03,0.1, seed=0,1,2: "
        "its sweep runs 4 jobs, not 18, and optim.lr is tuned over the values given only."
    )
    assert lines[1].startswith("optim.lr=1e-3 seed=0,1 replace pmnist's swept") and len(lines) == 2
    assert check.replaced_axes(check.parse_args(["ln_gain_init", "dataset.val_size=64"])) == []


def test_check_help_anywhere_is_exit_0(capsys):
    assert main(["check", "pmnist", "--help"]) == 0
    assert "usage: lnbench check" in capsys.readouterr().out


# ---- lnbench presets ------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["experiment"], ["--all"], ["-v", "model"]])
def test_presets_with_arguments_is_one_paragraph_exit_2(args, capsys):
    line = refused(["presets", *args], capsys)
    assert f"{args[0]!r} is not allowed" in line and "takes no arguments (only --help)" in line
