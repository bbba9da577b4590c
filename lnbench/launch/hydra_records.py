"""The records Hydra writes of each job before lnbench's task function runs (<run>/.hydra/config.yaml, hydra.yaml,
overrides.yaml, and a sweep's multirun.yaml): written atomically, as lnbench writes its own files, so that a full disk
leaves a whole record or none (never a torn overrides.yaml for `resume=` to read); and a full disk met there is the
job's failure, not the sweep's.

Hydra writes them in run_job, outside the task function: a full disk there ended the whole sweep in Hydra's launcher
with a traceback. Here such a record is left unwritten, and lnbench.launch.entry.Job writes what is missing itself
(`write_missing`), inside its failure policy: the job fails naming the disk, the sweep goes on. Hydra has no hook
before it writes them: its private `_save_config` is replaced (hydra-core 1.3.8; pinned in tests/test_layout.py).
"""

from __future__ import annotations

from pathlib import Path

import hydra.core.utils as hydra_utils
from omegaconf import OmegaConf

from lnbench.atomic import write_bytes
from lnbench.launch.failures import disk_state
from lnbench.runs import HYDRA_CONFIG, HYDRA_RECORD, OVERRIDES


def save(cfg, filename: str, output_dir: Path) -> None:
    """Hydra's `_save_config`, atomic; a disk that cannot take the record leaves it to the job."""
    try:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        write_bytes(Path(output_dir) / filename, OmegaConf.to_yaml(cfg).encode())
    except OSError as e:
        if disk_state(e) is None:
            raise


def install() -> None:
    """In each process that runs Hydra's run_job (the sweep's, a joblib or pool worker, a submitit job): the Job is
    made or unpickled there before its first job starts."""
    hydra_utils._save_config = save


def write_missing(hc, cfg, run_dir: Path) -> None:
    """The job's records Hydra could not write (a full disk), written now by the job: a failure here is its own."""
    if hc.output_subdir is None:  # a resumed run keeps the records it was started with
        return
    folder = Path(run_dir) / str(hc.output_subdir)
    records = {HYDRA_CONFIG: cfg, HYDRA_RECORD: {"hydra": hc}, OVERRIDES: hc.overrides.task}
    for name, node in records.items():
        if not (folder / Path(name).name).is_file():
            folder.mkdir(parents=True, exist_ok=True)
            write_bytes(folder / Path(name).name, OmegaConf.to_yaml(node).encode())
