"""Every key of the schema has a domain (issue 40): walked key by key, generated from lnbench/config/schema.py so that
a new key is covered the day it is added, each with a value outside its domain, which must be refused before any
run folder exists. In this process, as preflight checks a run (the config composed once per schema, the value set
as the command line would give it); a few real `lnbench train` calls show the exit code and the empty folder."""

import copy
import dataclasses
import enum
import typing

import pytest
from conftest import TINY_CLI, compose_train, run_cli
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lnbench.check.args import RESERVED
from lnbench.cli import main
from lnbench.config.domains import Range, Text, declared, innermost
from lnbench.config.schema import SCHEMAS, TrainConfig, presets
from lnbench.config.validate import check_typed, validate
from lnbench.errors import UserError
from lnbench.launch import user_modules
from lnbench.launch.preflight import build_check, check_claims, resume_overrides

# Keys whose domain is a set of names or paths, not a range or a type: a value outside it.
NAMED = {
    "device": "tpu",
    "resume": "/no/such/run",
    "imports": "[no_such_module_of_lnbench]",
    "claims": "[foo]",
    "tune": "[nosuch.key]",
    "stage": "judge",
    "_target_": "no_such_module.Thing",
    "norm.kind": "nosuch",
    "schedule.main": "5",
}
# The groups a schema's keys are reached through: the schema's first preset, and small sizes (a build takes ms).
SMALL = ["dataset.val_size=16", "dataset.test_size=16", "dataset.seq_len=8", "dataset.batch_size=8"]


def schema_selections() -> list[tuple[str, type, list[str]]]:
    """(prefix, schema, the overrides that select it) for the run's keys and every schema of every group."""
    out = [("", TrainConfig, ["dataset=adding", *SMALL, "model.hidden_size=8"])]
    for group, schemas in SCHEMAS.items():
        for base, schema in schemas.items():
            chosen = sorted(p for p, b in presets(group).items() if b == base)
            if group == "logger":
                chosen = [base.removeprefix("base_")]
            if not chosen:
                continue  # a schema no preset uses is tested through the preset that does
            prefix = f"logger.{chosen[0]}." if group == "logger" else f"{group}."
            extra = SMALL if group != "dataset" or base in ("base_adding", "base_copy") else []
            out.append(
                (
                    prefix,
                    schema,
                    [f"{group}={chosen[0]}", *(["dataset=adding", *SMALL] if group != "dataset" else extra)],
                )
            )
    return out


def outside(key: str, hint, domain) -> str:
    """A value outside `key`'s domain, as typed on the command line."""
    for name, value in NAMED.items():
        if key == name or key.endswith(f".{name}"):
            return value
    inner = innermost(hint)
    origin = typing.get_origin(inner)
    if isinstance(domain, Range):
        v = domain.outside(integer=inner is int or typing.get_args(inner) == (int,))
        return f"[{v}]" if domain.each else str(v)
    if isinstance(domain, Text):
        return "''"
    if inner is bool:
        return "2"
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return "nosuch"
    if inner is float:
        return "nan"  # any finite number is allowed (a gain's initial value)
    if inner is str:
        return "[a,b]"  # any text, never a list
    if origin is list and typing.get_args(inner) == (str,):
        return "[[a]]"
    raise AssertionError(f"{key} ({hint}) has no domain a test can step out of: declare one in the schema")


def cases() -> list[tuple[str, list[str], str]]:
    out = []
    for prefix, schema, selection in schema_selections():
        for key, hint, domain in declared(schema):
            full = f"{prefix}{key}"
            if full in ("model", "dataset", "optim", "logger") or key == "seed" and prefix == "dataset.":
                continue  # a group's choice (its own refusals: test_errors), the dataset's seed: the run's ${seed}
            out.append((full, selection, outside(full, hint, domain)))
    return out


CASES = cases()


def refusal(selection: list[str], key: str, text: str) -> str | None:
    """Why the value is refused, or None: composed as the command line gives it, then preflight's checks."""
    override = f"{key}={text}"
    if key == "resume":
        try:
            resume_overrides([override])
        except UserError as e:
            return str(e)
        return None
    cfg = copy.deepcopy(BASES[tuple(selection)])
    value = OverridesParser.create().parse_override(override).value()
    try:
        OmegaConf.update(cfg, key, value, merge=False)
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:  # the type: refused at composition, one paragraph (hydra_errors)
        return str(e).splitlines()[0]
    try:
        check_typed([override], cfg)
        check_claims(cfg)
        user_modules.load(cfg.imports)
        validate(cfg)
        build_check(cfg)
    except UserError as e:
        return str(e)
    return None


BASES: dict[tuple, object] = {}


@pytest.fixture(scope="module", autouse=True)
def bases():
    for _, _, selection in schema_selections():
        BASES[tuple(selection)] = compose_train(selection)


def test_every_key_of_every_schema_is_walked():
    keys = {k for k, _, _ in CASES}
    for schema in [TrainConfig, *[s for group in SCHEMAS.values() for s in group.values()]]:
        for f in dataclasses.fields(schema):
            named = (k for k in keys for part in [f".{k}."] if f".{f.name}." in part)
            assert any(named) or (f.name in ("model", "dataset", "optim", "logger", "seed")), (
                f"{schema.__name__}.{f.name} is not walked"
            )


@pytest.mark.parametrize("key,selection,value", CASES, ids=[f"{k}={v}" for k, _, v in CASES])
def test_a_value_outside_its_domain_is_refused_before_anything_runs(key, selection, value):
    said = refusal(selection, key, value)
    assert said is not None, f"{key}={value} was accepted"
    assert "Traceback" not in said


@pytest.mark.parametrize(
    "override,says",
    [
        ("optim.eps=0", "optim.eps=0.0 is not allowed: it must be a number > 0"),
        ("threads_follow=2", "threads_follow=2 is not allowed: threads_follow is true or false"),
        ("tune=[nosuch.key]", "nosuch.key is not a key of this config"),
        ("hydra.run.dir=", "hydra.run.dir= is not allowed: it is empty"),
    ],
)
def test_out_of_domain_on_the_command_line_is_exit_2_and_leaves_nothing(override, says, tmp_path):
    where = [] if override.startswith("hydra.run.dir") else [f"hydra.run.dir={tmp_path / 'run'}"]
    done = run_cli("train", *TINY_CLI, *where, override, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []  # no run folder, here or where it would have been


@pytest.mark.parametrize("key", sorted(RESERVED), ids=sorted(RESERVED))
def test_keys_only_lnbench_check_sets_are_refused_from_the_user_with_a_hint(key, tmp_path, capsys):
    """`lnbench check hydra.sweep.dir=X` ran the whole tuning sweep elsewhere, then found no runs (issue 40)."""
    out = tmp_path / "check"
    assert main(["check", "ln_gain_init", f"{key}=x", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lnbench: error: {key}=x is not allowed under lnbench check: ") and not out.exists()
    if key.startswith("hydra.") and "dir" in key:
        assert "--out" in err


def test_stage_is_lnbench_checks_own_on_the_command_line_of_train(capsys, tmp_path):
    assert main(["train", *TINY_CLI, "stage=judge", f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    assert "stage=judge is not allowed" in capsys.readouterr().err and not (tmp_path / "run").exists()
