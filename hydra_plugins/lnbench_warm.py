"""`hydra/launcher=warm` (conf/hydra/launcher/warm.yaml): a plain local sweep's jobs on lnbench's warm pool, the one
`lnbench check` runs its rounds on (lnbench.launch.process.pool), as joblib's workers run them. Only the class and
its kind live here, where Hydra looks for plugins; lnbench.launch.sweep.on_pool does the work, imported on first use
so that Hydra's scan of its plugins stays fast."""

from typing import Any, Sequence

from hydra.core.utils import JobReturn

from lnbench.config.launchers import FORKED, LauncherKind, LauncherOfOurs


class WarmLauncher(LauncherOfOurs):
    # its workers run job after job, each forked by lnbench; n_jobs and the thread limits as joblib's
    lnbench_kind = LauncherKind(FORKED, slots="n_jobs", warm_pool=True)

    def __init__(self, n_jobs: Any = -1) -> None:  # its options: lnbench.config.validate.check_launcher_keys
        self.params = {"n_jobs": n_jobs}

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from lnbench.launch.sweep import on_pool  # noqa: PLC0415 (the pool, Hydra's run_job: once a sweep launches)

        return on_pool.launch(self, job_overrides, initial_job_idx)
