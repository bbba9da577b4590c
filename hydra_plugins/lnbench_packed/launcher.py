"""`hydra/launcher=packed` (conf/hydra/launcher/packed.yaml): the jobs of a sweep that differ only in seed and
optimizer scalars train as packs of replicas in one process. Only the class lives here, where Hydra looks for
plugins; lnbench.launch.sweep.pack does the work, imported on first use so that Hydra's scan of its plugins stays
fast."""

from typing import Any, Sequence

from hydra.core.utils import JobReturn

from lnbench.config.launchers import IN_PROCESS, LauncherKind, LauncherOfOurs


class PackedLauncher(LauncherOfOurs):
    lnbench_kind = LauncherKind(IN_PROCESS)  # its packs one after another in the sweep's process, each forked

    def __init__(self, size: Any = 64) -> None:  # its options: lnbench.config.validate.check_launcher_keys
        self.size = size

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from lnbench.launch.sweep import pack  # noqa: PLC0415 (torch and Hydra's run_job: only once a sweep launches)

        return pack.launch(self, job_overrides, initial_job_idx)
