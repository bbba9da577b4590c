"""`hydra/launcher=slurm` (conf/hydra/launcher/slurm.yaml): Hydra's submitit SLURM launcher with lnbench's
rules for a shared cluster. Only the class lives here, where Hydra looks for plugins; lnbench.launch.slurm does the
work, imported on first use so that Hydra's scan of its plugins at start-up stays fast."""
from typing import Any, Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as HydraSlurmLauncher


class SlurmLauncher(HydraSlurmLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """In the sweep's process: submit the jobs not queued or completed already, wait for all of them."""
        from lnbench.launch import slurm

        return slurm.launch(self, job_overrides, initial_job_idx)

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """In the job's process on a node: run the job; after a stop signal, leave or requeue (lnbench.launch.slurm)."""
        from lnbench.launch import slurm

        # zero-argument super(): Hydra's plugin scan may run this module again in the job's process, which
        # rebinds the module's name SlurmLauncher to a new class that this instance is not one of
        run = super().__call__
        return slurm.run_on_node(lambda: run(*args, **kwargs), self.params.get("signal_delay_s", 90))
