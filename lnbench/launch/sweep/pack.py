"""`hydra/launcher=packed` (conf/hydra/launcher/packed.yaml): a sweep whose jobs differ only in seed, optimizer
scalars and clip_grad_norm trains them as packs of replicas, one process and one device per pack
(lnbench.training.replicas); every other job runs as the basic launcher runs it.

Each job of a pack keeps what a solo job has: Hydra writes its directory and .hydra/ (a first pass of run_job whose
task only records the job's config), the pack trains every job in a forked process under each job's lock, then a
second pass of run_job hands Hydra each job's outcome, with the sweep's callbacks (its progress, its end block) and
lnbench.launch.entry's failure records, as if the job had run alone. A pack whose model cannot run under vmap
(lnbench.training.pack) trains its jobs one by one, with a warning.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import configure_log, filter_overrides, setup_globals
from omegaconf import OmegaConf

from lnbench.config.validate import check_pack_size
from lnbench.launch import failures, hydra_job, start
from lnbench.launch.preflight import without_hydra
from lnbench.launch.process import threads
from lnbench.launch.sweep import stop as sweep_stop
from lnbench.training.device import resolve_device
from lnbench.training.pack import pack_key
from lnbench.training.replicas import PackJob, train_pack

log = logging.getLogger("lnbench")
ON_CPU = (
    "packing on a CPU: measured there, a pack of K replicas trained slower than K runs one after another "
    "(docs/performance.md); it trains as asked. Packs pay on a GPU."
)


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
    """Hydra's Launcher.launch: the jobs composed, grouped into packs (at most `launcher.size` each, in job order),
    each pack trained at its first job's turn; the JobReturns in job order."""
    setup_globals()
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    size = check_pack_size(launcher.size)
    loader = launcher.hydra_context.config_loader
    jobs = []
    for idx, overrides in enumerate(job_overrides, initial_job_idx):
        log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
        jobs.append(hydra_job.compose(loader, config, overrides, idx))
    packs: dict[str, list[list[int]]] = {}
    for i, job in enumerate(jobs):
        key = packing_key(job)
        if key is None:
            continue
        chunks = packs.setdefault(key, [[]])
        if len(chunks[-1]) == size:
            chunks.append([])
        chunks[-1].append(i)
    first_of = {chunk[0]: chunk for chunks in packs.values() for chunk in chunks if len(chunk) > 1}
    in_a_pack = {i for chunk in first_of.values() for i in chunk}
    returns: dict[int, Any] = {}
    for i, job in enumerate(jobs):
        if i in first_of:
            returns.update(zip(first_of[i], run_pack(launcher, [jobs[j] for j in first_of[i]])))
        elif i not in in_a_pack:
            returns[i] = hydra_job.run(launcher.hydra_context, job, launcher.task_function)
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return [returns[i] for i in range(len(jobs))]


def packing_key(sweep_config) -> str | None:
    """The job's lnbench.training.replicas.pack_key; None where its config does not resolve (the job then runs
    alone, and meets its error there, reported as its own)."""
    try:
        HydraConfig.instance().set_config(sweep_config)
        return pack_key(OmegaConf.to_container(without_hydra(sweep_config), resolve=True, enum_to_str=True))
    except Exception:  # noqa: BLE001 - see the doc
        return None


class Answer:
    """The second pass's task function: the job's outcome in the pack, as lnbench.launch.entry.Job would have ended
    it (its summary; a failure recorded and one line for Hydra), or the job run alone where it could not pack."""

    def __init__(self, job, outcome: tuple[str, Any], started: float):
        self.job, self.outcome, self.started = job, outcome, started

    def __call__(self, cfg):
        kind, value = self.outcome
        if kind == "returned":
            return value
        if kind == "solo":
            return self.job(cfg)
        hc = HydraConfig.get()
        run_dir = Path(hc.runtime.output_dir)
        if failures.classify(value).bug:
            failures.keep_traceback(run_dir, value)
        # another process's run: not this job's to record (as Job.sweep_job)
        return self.job.job_ended(value, run_dir, self.started, hc, record=kind != start.LOCKED)


def run_pack(launcher, sweep_configs: list) -> list:
    """The jobs of one pack: their directories written (first pass), trained together, then answered (second pass)."""
    job = launcher.task_function  # lnbench.launch.entry.Job: the plan, the failure policy
    started = time.time()
    prepared = [hydra_job.run(launcher.hydra_context, c, lambda cfg: None, quiet=True) for c in sweep_configs]
    if job.plan.local and sweep_stop.stopped(job.plan.out_dir):
        outcomes = [("returned", {"status": "not started"})] * len(prepared)
    else:
        outcomes = train(job, prepared)
    return [hydra_job.run(launcher.hydra_context, c, Answer(job, o, started)) for c, o in zip(sweep_configs, outcomes)]


def train(job, prepared: list) -> list[tuple[str, Any]]:
    """Each job admitted as a solo sweep job is (lnbench.launch.start.admit); those that pass train as one pack in a
    forked process (lnbench.launch.start.start); the others' outcomes say why not."""
    outcomes: list[tuple[str, Any] | None] = [None] * len(prepared)
    members: list[tuple[int, Any]] = []
    with ExitStack() as held:
        for i, ret in enumerate(prepared):
            outcomes[i] = start.admit(ret.cfg, Path(ret.hydra_cfg.hydra.runtime.output_dir), held)
            if outcomes[i] is None:
                members.append((i, ret))
        if len(members) < 2:  # nothing left to pack: alone, as the basic launcher runs them
            for i, _ in members:
                outcomes[i] = ("solo", "the only job of its pack left")
            held.close()
            return outcomes
        hc = members[0][1].hydra_cfg.hydra
        runtime = threads.decide(members[0][1].cfg, hc)  # one process, one runtime: the first job's
        pack = [
            PackJob(
                ret.cfg,
                Path(ret.hydra_cfg.hydra.runtime.output_dir),
                **start.names(ret.hydra_cfg.hydra, ret.cfg),
            )
            for _, ret in members
        ]
        if resolve_device(str(pack[0].cfg.device)).type == "cpu":
            log.warning(ON_CPU)
        leader = pack[0].run_dir
        log.info("pack of %d jobs (%s) in one process", len(pack), ", ".join(p.run_dir.name for p in pack))
        try:  # each job's crash.log gets a bug's traceback when it is answered
            answers = start.start(leader, train_pack, pack, fork=True, keep=False, runtime=runtime)
        except BaseException as e:  # noqa: BLE001 - the pack's process died (JobCrashed) or a bug: every job's
            answers = [("raised", e)] * len(pack)
        for (i, _), answer in zip(members, answers):
            outcomes[i] = answer
            if answer[0] == "solo":
                log.warning("job %s trains alone: %s", prepared[i].hydra_cfg.hydra.job.num, answer[1])
    return outcomes
