"""conf/ stays at the repository's top level, where users look for it, and ships in the wheel as the package data
of `lnbench.conf` (lnbench.CONF_DIR finds either). Only what pyproject.toml cannot say lives here: the package
list depends on conf/'s folders, each mapped under lnbench/conf. Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).parent
CONF_PACKAGES = ["lnbench.conf"] + sorted(
    "lnbench.conf." + ".".join(d.relative_to(HERE / "conf").parts) for d in (HERE / "conf").rglob("*") if d.is_dir()
)

setup(
    # hydra_plugins: lnbench's SLURM launcher and your defaults' folder (Hydra loads plugins from there only)
    packages=find_namespace_packages(include=["lnbench", "lnbench.*", "hydra_plugins", "hydra_plugins.*"])
    + CONF_PACKAGES,
    package_dir={"lnbench.conf": "conf"},
    # the C++ kernels are built on first use, on the user's machine (lnbench/nn/fast/native.py)
    package_data={"lnbench.nn.fast": ["csrc/*.cpp", "csrc/*.h"], **{p: ["*.yaml"] for p in CONF_PACKAGES}},
)
