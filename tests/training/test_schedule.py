"""The learning-rate schedules are torch's own schedulers (conf/schedule/), and give the lr values of the
closed form they replaced: warmup (s+1)/w for s < w, then constant, cosine or linear decay to 0."""

import math

import pytest
import torch
from conftest import compose_train, run_cli

from lnbench.training.recipe import setup_optimizer


def closed_form(step: int, steps: int, warmup: int, schedule: str) -> float:
    """The lr factor of step `step` as lnbench computed it before (a hand-written LambdaLR)."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(steps - warmup, 1)
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * progress))
    if schedule == "linear":
        return max(1.0 - progress, 0.0)
    return 1.0


@pytest.mark.parametrize("schedule", ["constant", "cosine", "linear"])
@pytest.mark.parametrize("warmup,steps", [(0, 12), (1, 12), (4, 12), (12, 12), (15, 12)])
def test_torch_schedulers_give_the_closed_form_lr_at_every_step(schedule, warmup, steps):
    cfg = compose_train(
        [f"schedule={schedule}", f"schedule.warmup_steps={warmup}", f"steps={steps}", "optim=sgd", "optim.lr=0.5"]
    )
    optimizer, scheduler = setup_optimizer(cfg.optim, cfg.schedule, torch.nn.Linear(2, 1), torch.device("cpu"))
    got = []
    for _ in range(steps + 3):  # and past the end, where decay stays at 0
        got.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    want = [0.5 * closed_form(s, steps, warmup, schedule) for s in range(steps + 3)]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_a_scheduler_resumes_from_its_state_dict():
    cfg = compose_train(["schedule=cosine", "schedule.warmup_steps=3", "steps=10", "optim=sgd"])

    def fresh():
        return setup_optimizer(cfg.optim, cfg.schedule, torch.nn.Linear(2, 1), torch.device("cpu"))

    opt, sched = fresh()
    for _ in range(5):
        opt.step()
        sched.step()
    opt2, sched2 = fresh()
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(sched.state_dict())
    for _ in range(5):
        opt.step(), sched.step(), opt2.step(), sched2.step()
        assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


def test_the_old_schedule_keys_still_work_on_the_command_line():
    done = run_cli("train", "optim.schedule=cosine", "optim.warmup_steps=7", "optim.clip_grad_norm=0.5", "--cfg", "job")
    assert done.returncode == 0, done.stderr
    assert "optim.schedule is now schedule" in done.stderr
    assert (
        "CosineAnnealingLR" in done.stdout and "warmup_steps: 7" in done.stdout and "clip_grad_norm: 0.5" in done.stdout
    )
