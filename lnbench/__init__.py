"""lnbench: the Layer Normalization paper's claims, tested with Hydra-composed PyTorch runs."""

import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# The Hydra config groups: the one place every module finds them. An installed wheel carries them as package data
# (lnbench/conf, setup.py); a checkout or an editable install keeps them at the repository's top level, beside the
# package. The package's own copy comes first: site-packages/conf may be another distribution's folder.
CONF_DIR = next((d for d in (_HERE / "conf", _HERE.parent / "conf") if (d / "train.yaml").is_file()), _HERE / "conf")


def user_conf_dir() -> Path | None:
    """The folder of your own defaults and presets (docs/install.md), which Hydra searches after CONF_DIR
    (hydra_plugins/lnbench_user_config): $LNBENCH_CONFIG_DIR, else $XDG_CONFIG_HOME/lnbench, else ~/.config/lnbench;
    None where LNBENCH_CONFIG_DIR is set empty (for tests: a developer's defaults stay out)."""
    given = os.environ.get("LNBENCH_CONFIG_DIR")
    if given is not None:
        return _expanded(given) if given else None
    return _expanded(os.environ.get("XDG_CONFIG_HOME") or "~/.config") / "lnbench"


def _expanded(path: str) -> Path:
    """`~`, `~user` expanded; left as given where there is no such user or home (lnbench.config.user_folder says)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def conf_dirs() -> list[Path]:
    """Where Hydra finds lnbench's presets, in its order (the first holding a name wins): CONF_DIR, then yours."""
    mine = user_conf_dir()
    return [CONF_DIR] + ([mine] if mine is not None and mine.is_dir() else [])


def __getattr__(name: str):
    # Read from the installed package's metadata on first use (pyproject.toml holds the one copy).
    if name == "__version__":
        # Here, not at the top: importlib.metadata costs ~17 ms, four times `lnbench --help`'s whole start-up.
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 (start-up time)

        try:
            return version("lnbench")
        except PackageNotFoundError:
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
