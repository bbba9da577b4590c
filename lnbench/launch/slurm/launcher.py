"""`hydra/launcher=slurm`: Hydra's submitit SLURM launcher, made to survive a shared cluster (docs/slurm.md).

The launcher class is hydra_plugins.lnbench_submitit_slurm.launcher.SlurmLauncher (Hydra takes launchers from
the hydra_plugins package only); its launch() and __call__ are `launch` and `run_on_node` here.

What it adds to `submitit_slurm` (conf/hydra/launcher/slurm.yaml sets the keys):

- **At SLURM's signal: checkpoint, then requeue.** A job treats SIGTERM (scancel, `scontrol requeue`,
  preemption, its time limit) and submitit's notice (SIGUSR2, `signal_delay_s` before the time limit) as a
  stop request: it writes a checkpoint at the end of the step (lnbench.training.checkpoint.StopSignals). Then, if
  SLURM is already ending the job, it leaves without a result and SLURM decides what comes next: a requeue
  starts it again, from that checkpoint; a cancel ends it and the sweep reports it. If SLURM is not ending
  it (the notice before the time limit, a preemption notice), the job requeues itself (`scontrol requeue`);
  a notice that came for the time limit counts against `max_num_timeout`, a preemption does not.
- **A failed task is a failed SLURM job** (exit 1, submitit's error result), not "completed successfully".
- **A sweep is never submitted twice.** The sweep directory records each job's SLURM id (.slurm_jobs.json);
  run again, the sweep waits for its jobs still in the queue instead of submitting them again, skips jobs
  that completed with this config, and submits the others (which continue from their checkpoints).
- **A job that ends without a result** (cancelled, killed at its time limit, its node lost) is a failed job
  of the sweep, named in its summary.json and the end-of-sweep block; the other jobs run on.
- **Quiet status** where sacct is unavailable (lnbench.launch.slurm.queue).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf

from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from lnbench.atomic import write_json
from lnbench.launch import hydra_job
from lnbench.launch.failures import JobFailed
from lnbench.launch.slurm.queue import GONE, QuietJob, job_info, queued, seconds
from lnbench.runs import HYDRA, HYDRA_CONFIG, OVERRIDES, Summary, read_summary, write_summary

log = logging.getLogger("lnbench")
LEDGER = ".slurm_jobs.json"  # in the sweep directory: job number -> SLURM job id, overrides, submitit folder
STOP_SIGNALS_ENV = "LNBENCH_STOP_SIGNALS"  # read by lnbench.training.checkpoint.StopSignals
WHY = {  # what ended a job that left no result, by SLURM's state
    "CANCELLED": "it was cancelled (scancel, or a preemption that does not requeue)",
    "TIMEOUT": "it reached its time limit before it could checkpoint and requeue itself",
    "NODE_FAIL": "its node failed",
    "OUT_OF_MEMORY": "it ran out of memory",
    "BOOT_FAIL": "its node failed to boot",
    "DEADLINE": "it reached its deadline",
    # an array's job cancelled while pending is never listed on its own; a finished one drops out after MinJobAge
    GONE: "it left SLURM's queue unfinished (cancelled while it waited, or ended before lnbench last looked)",
}


# ---- in the sweep's process ----------------------------------------------------------------------
def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """Hydra's Launcher.launch for `launcher` (hydra_plugins.lnbench_submitit_slurm): each job is waited for if
    still queued from an earlier submission, skipped if it completed with this config, else submitted."""
    config = launcher.config
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if "mode" in config.hydra.sweep:
        os.chmod(sweep_dir, mode=int(str(config.hydra.sweep.mode), 8))
    log.info(f"Submitit 'slurm' sweep output dir : {sweep_dir}")
    ledger = read_ledger(sweep_dir)
    alive = queued([e["job_id"] for e in ledger.values()])
    jobs: dict[int, Any] = {}  # job number -> a submitit job, or the JobReturn of a job completed earlier
    to_submit = []
    overrides_of = dict(enumerate(map(list, job_overrides), initial_job_idx))
    for idx, overrides in overrides_of.items():
        entry = ledger.get(str(idx), {})
        shown = " ".join(filter_overrides(overrides))
        if entry.get("overrides") == overrides and entry.get("job_id") in alive:
            log.info(
                f"\t#{idx} : {shown} (already queued as SLURM job {entry['job_id']}, "
                f"{alive[entry['job_id']]}: waiting for it)"
            )
            jobs[idx] = QuietJob(folder=entry["folder"], job_id=entry["job_id"])
        elif (done := completed(launcher, idx, overrides)) is not None:
            log.info(f"\t#{idx} : {shown} (completed earlier: skipped)")
            jobs[idx] = done
        else:
            log.info(f"\t#{idx} : {shown}")
            to_submit.append((overrides, "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
    if to_submit:
        folder = os.path.abspath(str(launcher.params["submitit_folder"]))
        for params, job in zip(to_submit, executor(launcher.params).map_array(launcher, *zip(*to_submit))):
            # followed as a QuietJob: submitit makes an array's jobs SlurmJobs, whose poller asks sacct
            jobs[params[2]] = QuietJob(folder=folder, job_id=job.job_id)
            ledger[str(params[2])] = {"job_id": job.job_id, "overrides": params[0], "folder": folder}
        write_ledger(sweep_dir, ledger)
    try:
        return [
            job if isinstance(job, JobReturn) else outcome(launcher, idx, overrides_of[idx], job)
            for idx, job in sorted(jobs.items())
        ]
    except KeyboardInterrupt:  # Ctrl-C stops this process only: its jobs are SLURM's, and go on
        log.warning(
            "stopped waiting: the sweep's SLURM jobs still queued or running go on (squeue --me); the same "
            "command waits for them again, without submitting them twice."
        )
        raise SystemExit(130) from None


def executor(params: dict[str, Any]):
    """submitit's executor as Hydra's launcher builds it."""
    import submitit  # noqa: PLC0415 (submitit: on submitting)

    init_keys = {"submitit_folder", "max_num_timeout"}
    ex = submitit.AutoExecutor(
        cluster="slurm", folder=params["submitit_folder"], slurm_max_num_timeout=params["max_num_timeout"]
    )
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items() if k not in init_keys})
    return ex


def job_config(launcher, idx: int, overrides: list[str]):
    """The job's config as its process will compose it (Hydra's launcher does the same on the node)."""
    return hydra_job.compose(launcher.hydra_context.config_loader, launcher.config, overrides, idx)


def job_dir(launcher, cfg) -> Path:
    return Path(str(launcher.config.hydra.sweep.dir)) / str(OmegaConf.select(cfg, "hydra.sweep.subdir"))


def completed(launcher, idx: int, overrides: list[str]) -> JobReturn | None:
    """The result of a job whose directory holds a completed run of the same config (else None)."""
    cfg = job_config(launcher, idx, overrides)
    folder = job_dir(launcher, cfg)
    summary = read_summary(folder)
    if summary.get("status") != "completed":
        return None
    task_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"])
    try:
        same = (folder / HYDRA_CONFIG).read_text() == OmegaConf.to_yaml(task_cfg)
    except OSError:
        same = False
    if not same:
        return None
    ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED, working_dir=os.getcwd())
    ret.return_value = summary
    return ret


def outcome(launcher, idx: int, overrides: list[str], job) -> JobReturn:
    """The job's JobReturn, or a failed one naming why a job ended without a result."""
    from submitit.core.utils import FailedJobError, UncompletedJobError  # noqa: PLC0415 (submitit: on submitting)

    try:
        return job.results()[0]
    except FailedJobError as e:  # the job raised: the last line of its traceback says what
        why = raised(str(e))
    except UncompletedJobError:
        state = job.watcher.get_state(job.job_id, mode="cache").split(" ")[0]
        why = f"SLURM job {job.job_id} ended {state} without a result: " + WHY.get(
            state, f"see its log {job.paths.stderr}"
        )
    cfg = job_config(launcher, idx, overrides)
    record_lost(job_dir(launcher, cfg), cfg, job.job_id, why)
    log.error("job %s failed: %s", idx, why)
    ret = JobReturn(overrides=overrides, status=JobStatus.FAILED, working_dir=os.getcwd())
    ret.return_value = JobFailed(
        why if why.startswith("lnbench: job") else f"lnbench: job {idx} ({' '.join(overrides)}) failed: {why}"
    )
    return ret


# ---- in the job's process, on a SLURM node ---------------------------------------------------------
def run_on_node(run_job: Callable[[], JobReturn], signal_delay_s: int) -> JobReturn:
    """Runs the job (Hydra's launcher __call__): submitit's notice is a stop request too; a failed task raises
    (submitit records an error, SLURM a failed job); a run stopped by a signal leaves or requeues."""
    import submitit  # noqa: PLC0415 (submitit: on submitting)

    notice = submitit.JobEnvironment._usr_sig()
    os.environ[STOP_SIGNALS_ENV] = notice.name  # in the train loop: finish the step, checkpoint, stop
    # Outside the loop (start-up, the moment after a stop, the test at the end) the same rule at once, from the
    # last checkpoint, in place of submitit's handler: on limits under 10 min it takes every notice for a time-out.
    signal.signal(notice, lambda signum, frame: leave_or_requeue(signal_delay_s))
    ret = run_job()
    value = ret.return_value  # a failed task raises here
    if isinstance(value, dict) and value.get("status") == "interrupted":
        leave_or_requeue(signal_delay_s)
    return ret


def leave_or_requeue(signal_delay_s: int) -> NoReturn:
    """After the run wrote its checkpoint on a stop signal: leave without a result if SLURM is ending this
    job (it then requeues or cancels it), else requeue it ourselves."""
    import submitit  # noqa: PLC0415 (submitit: on submitting)
    from submitit.core.job_environment import _checkpoint  # noqa: PLC0415 (submitit: on submitting)
    from submitit.core.utils import DelayedSubmission  # noqa: PLC0415 (submitit: on submitting)

    env = submitit.JobEnvironment()
    for s in (signal.SIGTERM, env._usr_sig()):  # a stop is under way: submitit's handlers must not requeue it too
        signal.signal(s, signal.SIG_IGN)
    info = job_info(env.job_id)  # <array id>_<task> for an array's job (the raw id of the last task is the array's)
    state = info.get("JobState", "UNKNOWN")
    if state != "RUNNING":
        log.warning("SLURM is ending this job (%s): its checkpoint is written; a requeue continues from it.", state)
        raise SystemExit(143)
    left = seconds(info.get("TimeLimit")) - seconds(info.get("RunTime"))
    timed_out = left <= signal_delay_s + 60  # the notice came for the time limit (SLURM checks limits every ~30 s)
    delayed = DelayedSubmission.load(env.paths.submitted_pickle)
    countdown = delayed._timeout_countdown - timed_out
    if countdown < 0:
        raise TimeoutError(
            f"it reached its time limit ({info.get('TimeLimit')}) once more than max_num_timeout allows; "
            f"its checkpoint is kept: re-run the sweep, or raise timeout_min or max_num_timeout"
        )
    _checkpoint(delayed, env.paths.submitted_pickle, countdown)  # the same job again, with the countdown it has left
    log.warning(
        "requeueing SLURM job %s (%s): it continues from its checkpoint",
        env.job_id,
        "time limit" if timed_out else "preempted",
    )
    try:
        env._requeue(countdown)
    except (OSError, subprocess.SubprocessError) as e:
        log.error(
            "scontrol requeue failed (%s): the job ends here; its checkpoint is kept for a re-run of the sweep", e
        )
    raise SystemExit(143)


# ---- the sweep directory's record of its SLURM jobs ------------------------------------------------
def read_ledger(sweep_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        return json.loads((sweep_dir / LEDGER).read_text())
    except (OSError, ValueError):
        return {}


def write_ledger(sweep_dir: Path, ledger: dict[str, dict[str, Any]]) -> None:
    write_json(sweep_dir / LEDGER, ledger)


def record_lost(job_dir: Path, cfg, job_id: str, why: str) -> None:
    """A job that ended without a result is failed in its own summary.json (keeping what its run wrote, so a
    re-run of the sweep continues it from its checkpoint); one that never started gets its .hydra/overrides.yaml
    too, so that the end-of-sweep block and the report list it."""
    found = read_summary(job_dir)
    if found.get("status") in ("completed", "failed", "diverged"):
        return  # the run said how it ended
    (job_dir / HYDRA).mkdir(parents=True, exist_ok=True)
    if not (job_dir / OVERRIDES).exists():
        OmegaConf.save(cfg.hydra.overrides.task, job_dir / OVERRIDES)
    lost = {"steps": 0, **found, "status": "failed", "error": why, "slurm_job": job_id}
    write_summary(job_dir, Summary.from_dict(lost))


def raised(message: str) -> str:
    """The exception line of the traceback inside submitit's FailedJobError message (between dashed lines)."""
    parts = re.split(r"\n-{10,}\n", message)
    trace = parts[1] if len(parts) >= 3 else message
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip()]
    last = lines[-1] if lines else message.strip()
    return re.sub(r"^[\w.]+(Error|Exception|Failed|Interrupt)\w*: ", "", last)
