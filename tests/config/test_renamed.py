"""Old keys keep working: lnbench.config.renamed rewrites them to their new place."""

from lnbench.config.renamed import rewrite

TABLE = {
    "optim.schedule": "schedule",
    "optim.warmup_steps": "schedule.warmup_steps",
    "logger.mode": "logger.wandb.mode",
}


def test_old_keys_become_new_keys_with_prefixes_and_sweeps_kept():
    given = ["optim.schedule=cosine", "+optim.warmup_steps=10,20", "~logger.mode", "optim.lr=0.1", "-m"]
    new, notes = rewrite(given, TABLE)
    assert new == ["schedule=cosine", "+schedule.warmup_steps=10,20", "~logger.wandb.mode", "optim.lr=0.1", "-m"]
    assert len(notes) == 3 and "optim.schedule is now schedule" in notes[0]


def test_a_key_that_only_starts_like_an_old_one_is_left_alone():
    new, notes = rewrite(["optim.schedule_x=1", "logger.modes=2"], TABLE)
    assert new == ["optim.schedule_x=1", "logger.modes=2"] and notes == []


def test_a_checkpoint_from_before_a_key_moved_is_refused_naming_the_move(tmp_path):
    import pytest

    from lnbench.errors import ConfigError
    from lnbench.training.checkpoint import check_same_config

    old = {"optim": {"lr": 0.1, "schedule": "constant", "warmup_steps": 0, "clip_grad_norm": None}, "steps": 5}
    new = {"optim": {"lr": 0.1}, "schedule": {"warmup_steps": 0}, "clip_grad_norm": None, "steps": 5}
    with pytest.raises(ConfigError, match=r"older lnbench.*optim.schedule -> schedule.*new directory"):
        check_same_config(old, new, tmp_path)
