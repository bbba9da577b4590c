"""lnbench: the Layer Normalization paper's claims, tested with Hydra-composed PyTorch runs."""


def __getattr__(name: str):
    # Read from the installed package's metadata on first use (pyproject.toml holds the one copy).
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("lnbench")
        except PackageNotFoundError:
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
