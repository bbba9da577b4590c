"""Tab completion of `lnbench train` overrides (config groups, keys, values), by Hydra's own completion plugin for
bash (zsh uses it through bashcompinit): `eval "$(lnbench train -sc install=bash)"`.

Hydra names the program from sys.argv[0], `lnbench train`, where the shell sees two words: its install script would
register both `lnbench` and `train` as commands, and the script's query, `lnbench -sc query=bash` with the whole
command line in $COMP_LINE, would meet lnbench's dispatcher. So `install` rewrites the script for the command
`lnbench`, and `query` answers the script: lnbench's commands for the word after `lnbench`, Hydra's candidates for
the words after `lnbench train` (the line as Hydra reads it, without `train`), nothing after another command (the
shell's own file completion then).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from typing import Callable


def install(train: Callable[[list[str]], int], args: list[str]) -> int:
    """`lnbench train -sc install=bash` (or uninstall=, zsh): Hydra's script, for the command `lnbench`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = train(args)
    print(re.sub(r"\blnbench train\b", "lnbench", out.getvalue()), end="")
    return code


def query(train: Callable[[list[str]], int], args: list[str], commands: list[str]) -> int:
    """`lnbench -sc query=bash`, as the installed script calls it, the line typed so far in $COMP_LINE."""
    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    if len(words) < 2 or (len(words) == 2 and not line[-1:].isspace()):  # the command itself is being typed
        print(" ".join(commands))
        return 0
    if words[1] != "train":
        return 0
    os.environ["COMP_LINE"] = re.sub(r"^(\s*\S+)\s+train\b", r"\1", line)
    return train(args)
