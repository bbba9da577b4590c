"""Hydra's command line as Hydra reads it: its flags and overrides, and a basic sweep expanded into its jobs.

Hydra has no public API for the first: `parse` uses a private one (tests/launch/test_preflight.py fails when
Hydra changes it; tests/test_layout.py pins it). The expansion uses the public override parser.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shlex

# Flags with which `lnbench train` shows something instead of running (Hydra's business alone).
NOT_A_RUN = (
    "help",
    "hydra_help",
    "cfg",
    "info",
    "shell_completion",
    "experimental_rerun",
    "config_path",
    "config_name",
    "config_dir",
)


def parse(args: list[str]) -> argparse.Namespace:
    """Hydra's own parse of `lnbench train <args>`: .overrides, .multirun and the flags of NOT_A_RUN."""
    from hydra._internal.utils import get_args_parser  # noqa: PLC0415 (Hydra: report, presets run without)

    parsed, _ = get_args_parser().parse_known_args(args)
    return parsed


def is_a_run(parsed: argparse.Namespace) -> bool:
    return not any(getattr(parsed, k, None) for k in NOT_A_RUN)


def axes(overrides: list[str]) -> dict[str, list[str]]:
    """Each key's overrides, one per value (`seed=0,1` -> seed: [seed=0, seed=1]), as Hydra's basic sweeper
    reads them: a key given twice keeps its last values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415 (as above)

    found: dict[str, list[str]] = {}
    for o in OverridesParser.create().parse_overrides(overrides):
        key = o.get_key_element()
        found[key] = (
            [f"{key}={v}" for v in o.sweep_string_iterator()]
            if o.is_sweep_override()
            else [f"{key}={o.get_value_element_as_str()}"]
        )
    return found


def sweeping(overrides: list[str]) -> dict[str, bool]:
    """Each key (or group) the overrides set -> whether they sweep it (a,b / range() / choice())."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415 (as above)

    return {o.key_or_group: o.is_sweep_override() for o in OverridesParser.create().parse_overrides(overrides)}


def expand(overrides: list[str]) -> list[list[str]]:
    """Every job's overrides, in the basic sweeper's order: the product of the axes."""
    return [list(job) for job in itertools.product(*axes(overrides).values())]


def unreadable(overrides: list[str]) -> str:
    """The first override Hydra's grammar cannot read ("" if every one reads)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415 (as above)
    from hydra.errors import OverrideParseException  # noqa: PLC0415 (as above)

    parser = OverridesParser.create()
    for o in overrides:
        try:
            parser.parse_overrides([o])
        except OverrideParseException:
            return o
    return ""


def quoting_hint() -> str:
    """What to say after Hydra's lexer refused a value (`LexerNoViableAltException`): ordinary shell text
    (~, spaces, non-ASCII letters, quotes) is not a bare Hydra value."""
    return (
        "Hydra reads an override's value in its own syntax: quote a value with ~, spaces, non-ASCII letters or "
        "any of = , [ ] { } ( ) ' \" for Hydra and for the shell, e.g. 'dataset.data_dir=\"~/my data\"' "
        "(lnbench expands ~ in paths itself)."
    )


def hydra_value(text: str) -> str:
    """`text` as an override's value Hydra reads back unchanged (quoted where its grammar needs it)."""
    if re.fullmatch(r"[\w./+@%:-]+", text, re.ASCII) and text[0] not in "+-":
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def shell_arg(key: str, value: object) -> str:
    """`key=value` as one argument to paste into a shell, its value as Hydra reads it back: paths with spaces work."""
    arg = f"{key}={hydra_value(str(value))}"
    if not re.search(r"[\"$`\\!]", arg) and arg != shlex.quote(arg):  # "hydra.sweep.dir='/my runs/a'" reads best
        return f'"{arg}"'
    return shlex.quote(arg)
