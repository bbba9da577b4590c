"""The machine a GPU run measured on (scripts/gpu/run.sh's first section): nvidia-smi's own lines, then the GPU,
driver and library versions as one JSON object (argv[1])."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata

import torch


def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def main() -> int:
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    try:
        print(subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=15).stdout)
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = None
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "triton": version("triton"),
        "hydra-core": version("hydra-core"),
        "driver": driver or None,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "cpu_count": os.cpu_count(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(sm_count=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1))
    print(json.dumps(info, indent=1))
    with open(sys.argv[1], "w") as f:
        json.dump(info, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
