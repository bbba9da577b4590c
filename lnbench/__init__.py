"""lnbench: the Layer Normalization paper's claims, tested with Hydra-composed PyTorch runs."""

from pathlib import Path

_HERE = Path(__file__).resolve().parent
# The Hydra config groups: the one place every module finds them. An installed wheel carries them as package data
# (lnbench/conf, setup.py); a checkout or an editable install keeps them at the repository's top level, beside the
# package. The package's own copy comes first: site-packages/conf may be another distribution's folder.
CONF_DIR = next((d for d in (_HERE / "conf", _HERE.parent / "conf") if (d / "train.yaml").is_file()), _HERE / "conf")


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
