"""What a run records as it trains, written once for a run trained alone (lnbench.training.recipe.Recipe) and a
packed replica (lnbench.training.replicas.Replica): its summary opened with what it trains and its provenance, its
validation and test metrics, how it ended (diverged, interrupted, failed), and the summary's last fields, handed to
the sinks with the end-of-run block. So a field added for one is the other's too (tests/training/test_replicas.py
compares their summaries)."""

from __future__ import annotations

import logging
import math

from lnbench import phases
from lnbench.errors import Interrupted
from lnbench.runs import Summary
from lnbench.training import provenance, tasks
from lnbench.training.flags import suspect
from lnbench.training.tracker import end_of_run_block

log = logging.getLogger("lnbench")


def fmt(values: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.4g}" for k, v in values.items())


class RunRecord:
    """Recipe's records (a mixin: the recipe's tracker, timer, step, val, best and parts are its state)."""

    def record_val(self, values: dict[str, float]) -> None:
        self.val = values
        self.tracker.log("val", self.step, self.val, **self.seen())
        for k, v in self.val.items():
            self.best[k] = min(self.best.get(k, math.inf), v)
        self.tracker.show(self.step, "val " + fmt(self.val), line=True)

    def record_test(self, summary: Summary, test: dict[str, float], at_len: dict[int, dict[str, float]]) -> None:
        self.tracker.log("test", self.step, test)
        summary.test, summary.final_val, summary.best_val = test, self.val, self.best
        for n, values in at_len.items():
            self.tracker.log("test", self.step, values, eval_seq_len=n)
            summary.test_at_len = {**(summary.test_at_len or {}), str(n): values}
        summary.status = "completed"  # only now: a run whose last test failed is not skipped as done
        if said := suspect(self.cfg, self.val, self.spec.baseline):
            summary.flags = said
            log.warning("flagged: %s", "; ".join(said))

    def record_diverged(self, summary: Summary, step: int) -> None:
        summary.status, summary.diverged_at_step = "diverged", step
        log.error("loss is not finite at step %d: stopping (status diverged).", step)

    def open_summary(self, follows: str) -> Summary:
        """The summary as the run begins: what it trains, where, on how many threads (and whether the count follows
        the free cores, and why: `follows`), and its provenance."""
        with self.timer.phase(phases.RUN_PROVENANCE):
            summary = Summary(
                "running",
                params=self.n_params,
                device=str(self.device),
                primary_metric=tasks.primary_metric(self.spec),
                baseline=self.spec.baseline,
                threads=self.runtime.threads,
                provenance=provenance.collect(str(self.device), self.kernel_paths(), self.runtime),
            )
        summary.provenance["threads_follow"] = follows
        return summary

    def ended_by(self, summary: Summary, error: BaseException) -> None:
        """The loop ended with `error`: the run was interrupted (a stop signal, Ctrl-C) or failed, unless it said."""
        if summary.status == "running":
            stopped = isinstance(error, (Interrupted, KeyboardInterrupt))
            summary.status, summary.error = "interrupted" if stopped else "failed", f"{type(error).__name__}: {error}"

    def close_summary(self, summary: Summary, train_time: float, start_step: int) -> None:
        """The summary's last fields (`train_time`: the loop's seconds besides evaluations and checkpoints), handed to
        the sinks (summary.json, W&B), then the end-of-run block."""
        seconds = self.timer.seconds
        summary.steps, summary.wall_time = self.step, round(self.tracker.elapsed(), 3)
        summary.time_per_step = round(train_time / max(self.step - start_step, 1), 6)
        summary.eval_time = round(seconds[phases.EVAL_VAL], 3)
        summary.checkpoint_time = round(seconds[phases.CHECKPOINTS], 3)
        if self.resumed_at:
            summary.resumed_at = self.resumed_at
        if self.follow:
            summary.threads_followed = self.follow.record()
        summary.wandb = self.tracker.where("wandb")  # the W&B run's location (None without W&B), as before
        self.tracker.finish(summary)
        log.info(end_of_run_block(summary.as_dict(), self.run_dir, tasks.primary_metric(self.spec)))
