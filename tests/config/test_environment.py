"""lnbench's environment variables are checked as flags are (lnbench.environment): every variable the code reads is
in the table, and each refuses a value outside its domain before any command runs, in one paragraph, exit 2."""

import re
from pathlib import Path

import pytest

from lnbench import environment
from lnbench.cli import main
from lnbench.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"LNBENCH_[A-Z_]*[A-Z]")
NOBODY = "~no_such_user_lnbench"


def bad_values(tmp: Path) -> dict[str, list[tuple[str, str]]]:
    """Each variable's values outside its domain, with what the refusal says of each."""
    a_file = tmp / "a_file"
    a_file.write_text("")
    return {
        "LNBENCH_DATA_DIR": [(str(a_file), "is a file"), (f"{NOBODY}/data", "names no user")],
        "LNBENCH_CONFIG_DIR": [(NOBODY, "names no user"), (str(a_file), "is a file")],
        "LNBENCH_CACHE": [
            (str(a_file), "is a file"),
            ("/proc/lnbench-cache", "refuses new files"),
            (NOBODY, "no user"),
        ],
        "LNBENCH_PHASES": [
            (str(tmp), "is a folder"),
            (str(tmp / "no" / "such" / "phases.jsonl"), "does not exist"),
            ("/proc/phases.jsonl", "refuses new files"),
            (f"{NOBODY}/phases.jsonl", "names no user"),
        ],
        "LNBENCH_STOP_SIGNALS": [
            ("KILL", "SIGKILL cannot be caught"),
            ("USR2,SIGSTOP", "SIGSTOP cannot be caught"),
            ("NOSUCH", "NOSUCH is not a signal's name"),
            ("USR2;USR1", "is not a signal's name"),
        ],
        "LNBENCH_NATIVE": [("2", "give 0 or 1"), ("yes", "give 0 or 1")],
        "LNBENCH_TRITON": [("2", "give 0 or 1 or interpret"), ("on", "give 0 or 1 or interpret")],
        "LNBENCH_CUDA_GRAPHS": [("maybe", "give 0 or 1")],
    }


GOOD = {
    "LNBENCH_DATA_DIR": ["~", "/no/such/folder/yet"],
    "LNBENCH_CONFIG_DIR": ["", "~"],
    "LNBENCH_CACHE": ["{tmp}/cache/new"],
    "LNBENCH_PHASES": ["{tmp}/phases.jsonl"],
    "LNBENCH_STOP_SIGNALS": ["USR2", "SIGUSR1, usr2", ""],
    "LNBENCH_NATIVE": ["0", "1"],
    "LNBENCH_TRITON": ["0", "1", "interpret"],
    "LNBENCH_CUDA_GRAPHS": ["0", "1"],
}
CASES = [(name, i) for name, values in bad_values(Path("/tmp")).items() for i in range(len(values))]


def code_files():
    for folder in ("lnbench", "hydra_plugins", "conf"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".yaml") and path.name != "environment.py":
                yield path


def test_the_table_lists_every_variable_the_code_reads_and_no_other():
    named = {m for path in code_files() for m in NAME.findall(path.read_text())}
    assert named and named == set(environment.VARIABLES), named ^ set(environment.VARIABLES)
    assert set(bad_values(Path("/tmp"))) == set(environment.VARIABLES) == set(GOOD)  # each walked below


def test_the_code_reads_them_through_the_table():
    """One reader: a value read past lnbench.environment would be one its check never saw. (The data folder's
    default is an OmegaConf interpolation in the schema, resolved by OmegaConf: checked, not read, here.)"""
    direct = re.compile(r"(environ\.get\(|environ\[|getenv\()\s*['\"]LNBENCH_")
    found = [f"{p.relative_to(ROOT)}" for p in code_files() if direct.search(p.read_text())]
    assert found == []
    assert direct.search('os.environ.get("LNBENCH_X")') and direct.search("os.getenv('LNBENCH_X')")  # the scan sees


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_each_variable_with_a_bad_value_is_refused_before_anything_runs(name, i, tmp_path, monkeypatch, capsys):
    value, says = bad_values(tmp_path)[name][i]
    monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    assert main(["train", "steps=1", f"hydra.run.dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lnbench: error: {name}={value} is not allowed: ") and says in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"It is {environment.VARIABLES[name].meaning}; give " in err
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(GOOD))
def test_each_variables_good_values_pass(name, tmp_path, monkeypatch):
    for value in GOOD[name]:
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
        environment.check()


@pytest.mark.parametrize("command", ["train", "report", "check", "bench", "status", "presets"])
def test_every_command_checks_them(command, monkeypatch, capsys):
    monkeypatch.setenv("LNBENCH_STOP_SIGNALS", "KILL")
    assert main([command]) == 2
    assert capsys.readouterr().err.startswith("lnbench: error: LNBENCH_STOP_SIGNALS=KILL is not allowed")


def test_a_reader_gets_the_checked_value(monkeypatch, tmp_path):
    import signal

    monkeypatch.setenv("LNBENCH_STOP_SIGNALS", "usr2, SIGUSR1")
    monkeypatch.setenv("LNBENCH_PHASES", "~/phases.jsonl")
    assert environment.stop_signals() == (signal.SIGUSR2, signal.SIGUSR1)
    assert environment.path("LNBENCH_PHASES") == Path.home() / "phases.jsonl"
    with pytest.raises(KeyError):
        environment.value("LNBENCH_NO_SUCH_VARIABLE")
    with pytest.raises(ConfigError, match="LNBENCH_NATIVE=on"):
        monkeypatch.setenv("LNBENCH_NATIVE", "on")
        environment.check()
