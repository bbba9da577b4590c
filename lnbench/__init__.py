"""lnbench: the Layer Normalization paper's claims, tested with Hydra-composed PyTorch runs."""
from pathlib import Path

# The Hydra config groups (conf/ beside the package): the one place every module finds them.
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def __getattr__(name: str):
    # Read from the installed package's metadata on first use (pyproject.toml holds the one copy).
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("lnbench")
        except PackageNotFoundError:
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
