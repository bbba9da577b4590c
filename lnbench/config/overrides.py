"""Hydra's command line as Hydra reads it: its flags and overrides, and a basic sweep expanded into its jobs.

Hydra has no public API for the first: `parse` uses a private one (tests/launch/test_preflight.py fails when
Hydra changes it), and so does `applied_where_it_exists`, the other place lnbench reaches into Hydra: its
composition step, wrapped for your own defaults (tests/install/test_user_config.py). The expansion uses the
public override parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import re
import shlex
from typing import Any, Callable

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


# ---- your own defaults, where the config has each key (hydra_plugins/lnbench_user_config) ---------------------
def applied_where_it_exists(provider: str, file_of: Callable[[str], str]) -> None:
    """Your defaults file is merged into the config key by key where the config has the key, ignored elsewhere
    (lnbench.config.user_folder.applicable): a dataset's data_dir is no error for a dataset that reads no files.

    `provider`: the search path entry of the folder (hydra_plugins/lnbench_user_config); `file_of`: the file a
    config path of it names. Hydra merges each file of the defaults list whole, and a key a schema lacks is an
    error; it has no hook for this. So its composition step (a private method) is wrapped, in every process that
    composes (the CLI, each joblib worker, each submitit job: Hydra imports the plugin in each): where the defaults
    list holds a file of ours from local/, the config is composed once without it, that file is cut down to the
    keys that config has, and Hydra composes as ever with the cut file. Other Hydra apps never hold one (the
    plugin adds the folder to lnbench's app only): for them nothing changes. tests/install/test_user_config.py
    fails if Hydra's private method changes."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # noqa: PLC0415 (as above)

    original = ConfigLoaderImpl._compose_config_from_defaults_list
    if getattr(original, "lnbench_user_config", False):
        return

    def compose(self: Any, defaults: list, repo: Any) -> Any:
        mine = {}
        for d in defaults:
            path = d.config_path or ""
            if path.startswith("local/") and (loaded := repo.load_config(config_path=path)) is not None:
                if loaded.provider == provider:
                    mine[path] = loaded
        if not mine:
            return original(self, defaults, repo)
        from lnbench.config.user_folder import applicable  # noqa: PLC0415 (it imports this module)

        reference = original(self, [d for d in defaults if d.config_path not in mine], repo)
        cut = {
            path: dataclasses.replace(loaded, config=applicable(loaded.config, reference, file_of(path)))
            for path, loaded in mine.items()
        }
        return original(self, defaults, CutRepository(repo, cut))

    compose.lnbench_user_config = True  # type: ignore[attr-defined]
    ConfigLoaderImpl._compose_config_from_defaults_list = compose


class CutRepository:
    """Hydra's config repository, with our local/ files cut to the keys the config has."""

    def __init__(self, repo: Any, cut: dict[str, Any]):
        self._repo, self._cut = repo, cut

    def load_config(self, config_path: str) -> Any:
        return self._cut.get(config_path) or self._repo.load_config(config_path=config_path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo, name)
