"""The `site` node every config has: what differs from one user or machine to the next, set once in your own
defaults (local/default.yaml; docs/install.md) and read by the presets through interpolations: the datasets read
from files take its data_dir, the W&B sink its entity and project, hydra/launcher=slurm its partition and account."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lnbench.config.domains import text


@dataclass
class SiteConfig:
    data_dir: str = text("${oc.env:LNBENCH_DATA_DIR,../shared/data}")  # else the shared folder beside the repo
    wandb_entity: Optional[str] = None
    wandb_project: str = text("lnbench")
    slurm_partition: Optional[str] = None
    slurm_account: Optional[str] = None
