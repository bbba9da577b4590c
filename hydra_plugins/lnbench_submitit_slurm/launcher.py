"""`hydra/launcher=slurm` (conf/hydra/launcher/slurm.yaml): Hydra's submitit SLURM launcher with lnbench's
rules for a shared cluster. Only the class lives here, where Hydra looks for plugins;
lnbench.launch.slurm.launcher does the work, imported on first use so that Hydra's scan of its plugins at
start-up stays fast.

Without the `slurm` extra (hydra-submitit-launcher) the module defines no launcher and imports cleanly: Hydra's scan
imports every module under hydra_plugins and warns at every start about one that fails ("incompatible or buggy").
hydra/launcher=slurm is then refused by lnbench.launch.preflight with the extra to install."""

from typing import Any, Sequence

from hydra.core.utils import JobReturn

from lnbench.config.launchers import SUBMITIT_SLURM

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as HydraSlurmLauncher
except ImportError:  # the optional dependency: pip install 'lnbench[slurm]'
    HydraSlurmLauncher = None

if HydraSlurmLauncher is not None:

    class SlurmLauncher(HydraSlurmLauncher):
        lnbench_kind = SUBMITIT_SLURM  # Hydra's submitit_slurm's, without its warning

        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
            """In the sweep's process: submit the jobs not queued or completed already, wait for all of them."""
            from lnbench.launch.slurm import launcher as slurm  # noqa: PLC0415 (Hydra scans its plugins at every start)

            return slurm.launch(self, job_overrides, initial_job_idx)

        def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
            """In the job's process on a node: run the job; after a stop signal, leave or requeue
            (lnbench.launch.slurm.launcher)."""
            from lnbench.launch.slurm import launcher as slurm  # noqa: PLC0415 (Hydra scans its plugins at every start)

            # zero-argument super(): Hydra's plugin scan may run this module again in the job's process, which
            # rebinds the module's name SlurmLauncher to a new class that this instance is not one of.
            # signal_delay_s: conf/hydra/launcher/slurm.yaml's, always composed (one default, no fallback here).
            run = super().__call__
            return slurm.run_on_node(lambda: run(*args, **kwargs), self.params["signal_delay_s"])
