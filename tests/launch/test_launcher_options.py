"""Every launcher Hydra can choose (Hydra's and lnbench's) refuses an option it does not take, naming it and the
ones it takes, before any job starts: `+hydra.launcher.x=1` is otherwise swallowed (packed) or a crash mid-sweep."""

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from lnbench.cli import main
from lnbench.config.schema import register_configs
from lnbench.config.validate import check_launcher_keys
from lnbench.errors import ConfigError
from lnbench.launch.entry import CONF_DIR


def launchers() -> list[str]:
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return sorted(GlobalHydra.instance().config_loader().get_group_options("hydra/launcher"))


LAUNCHERS = launchers()


def composed(launcher: str, *extra: str):
    if launcher != "basic" and launcher != "packed":
        pytest.importorskip(f"hydra_plugins.hydra_{'joblib' if launcher == 'joblib' else 'submitit'}_launcher")
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("train", [f"hydra/launcher={launcher}", *extra], return_hydra_config=True).hydra.launcher


def test_the_launchers_walked_include_lnbenchs_own():
    assert {"basic", "joblib", "packed", "slurm", "submitit_local", "submitit_slurm"} <= set(LAUNCHERS)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_an_option_a_launcher_does_not_take_is_refused_before_the_sweep(launcher, tmp_path, capsys):
    composed(launcher)  # skipped without its extra
    sweep = tmp_path / "sweep"
    code = main(
        [
            "train",
            "-m",
            f"hydra/launcher={launcher}",
            "seed=0,1",
            "+hydra.launcher.n_jobz=2",
            f"hydra.sweep.dir={sweep}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(
        f"lnbench: error: hydra.launcher.n_jobz=2 is not allowed: the {launcher} launcher "
        f"(hydra/launcher={launcher}) has no option 'n_jobz'."
    ), err
    assert not sweep.exists()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_each_option_a_launcher_takes_is_accepted_and_named(launcher):
    """No launcher refuses its own options: its composed config passes, and a refusal lists every one of them."""
    node = composed(launcher)
    check_launcher_keys(node, launcher)
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", [f"hydra/launcher={launcher}", "+hydra.launcher.zzz=1"], return_hydra_config=True)
    with pytest.raises(ConfigError) as refused:
        check_launcher_keys(cfg.hydra.launcher, launcher)
    for option in (k for k in node if k != "_target_"):
        assert option in str(refused.value), (option, str(refused.value))


def test_the_packed_launcher_refuses_joblibs_n_jobs_and_says_which_it_meant(capsys, tmp_path):
    code = main(
        [
            "train",
            "-m",
            "hydra/launcher=packed",
            "seed=0,1",
            "+hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={tmp_path}/s",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.strip().endswith("has no option 'n_jobs'. Its options are size."), err
