"""Tab completion as a bash user gets it: the script `lnbench train -sc install=bash` prints, sourced in bash, and
its completion function run on a typed line, which queries `lnbench -sc query=bash` the way the shell does."""

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.fixture(scope="module")
def lnbench_on_path(tmp_path_factory):
    """An `lnbench` command that runs this checkout's lnbench, first on PATH (the script looks it up there)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    exe = bin_dir / "lnbench"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m lnbench.cli "$@"\n')
    exe.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def complete(env, line: str) -> list[str]:
    """The candidates bash offers after `line` (typed up to its end), with the installed script."""
    script = (
        'eval "$(lnbench train -sc install=bash)" || exit 3\n'
        "complete -p lnbench >/dev/null || exit 4\n"
        'COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; COMP_WORDS=($COMP_LINE); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n'
        '[[ "$COMP_LINE" == *" " ]] && COMP_CWORD=${#COMP_WORDS[@]}\n'
        "hydra_bash_completion\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", script, "bash", line], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_install_script_is_for_the_lnbench_command(lnbench_on_path):
    out = subprocess.run(
        ["lnbench", "train", "-sc", "install=bash"], env=lnbench_on_path, capture_output=True, text=True, timeout=120
    ).stdout
    assert out.rstrip().endswith("-F hydra_bash_completion lnbench"), out[-200:]
    assert "lnbench train" not in out  # `train` registered as a command of its own was the bug


@pytest.mark.parametrize(
    "line, expected",
    [
        ("lnbench train optim=", {"optim=adam", "optim=rmsprop", "optim=sgd"}),  # a group's presets
        ("lnbench train model=ln_ls", {"model=ln_lstm"}),
        ("lnbench train -m dataset.batch_", {"dataset.batch_size="}),  # a key of the chosen preset
        ("lnbench t", {"train"}),  # the command itself
    ],
)
def test_completes_groups_keys_and_values(lnbench_on_path, line, expected):
    got = set(complete(lnbench_on_path, line))
    assert expected <= got, got
    assert all(c.startswith(line.split()[-1]) for c in got), got  # only what fits the word typed


def test_other_commands_get_the_shells_file_completion(lnbench_on_path, tmp_path):
    (tmp_path / "sweep_dir").mkdir()
    env = {**lnbench_on_path, "COMP_LINE": "lnbench report "}
    out = subprocess.run(["lnbench", "-sc", "query=bash"], env=env, capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.strip()) == (0, "")  # no candidates: bash's -o default lists files
