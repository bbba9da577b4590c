"""One copy of each default: the schema in lnbench/config/schema.py. A preset sets only what makes it that preset;
a model's constructor agrees with its schema; every dataset argument has a schema field (so the command
line can set it)."""

import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml
from hydra.utils import get_class

from lnbench.config.schema import CONF_DIR, SCHEMAS


def schema_defaults(schema) -> dict:
    out = {}
    for f in dataclasses.fields(schema):
        value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out[f.name] = (
            schema_defaults(type(value)) if dataclasses.is_dataclass(value) else getattr(value, "value", value)
        )
    return out


def repeats(values: dict, defaults: dict, prefix="") -> list[str]:
    found = []
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict):
            found += repeats(value, defaults[key], f"{prefix}{key}.")
        elif key in defaults and value == defaults[key]:
            found.append(f"{prefix}{key}={value}")
    return found


PRESETS = [p for group in ("model", "optim") for p in sorted((CONF_DIR / group).glob("*.yaml"))]


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_preset_never_repeats_its_schemas_default(path: Path):
    body = yaml.safe_load(path.read_text()) or {}
    base = next(d.lstrip("/") for d in body.pop("defaults") if isinstance(d, str) and d.startswith("/base_"))
    schema = SCHEMAS[path.parent.name][base]
    assert repeats(body, schema_defaults(schema)) == []


@pytest.mark.parametrize("group,name,schema", [(g, n, s) for g in ("model", "dataset") for n, s in SCHEMAS[g].items()])
def test_a_constructors_defaults_agree_with_its_schema(group, name, schema):
    defaults = schema_defaults(schema)
    for p in inspect.signature(get_class(schema._target_).__init__).parameters.values():
        if p.name in ("self", "spec", "kwargs"):
            continue
        # data_dir: the schema's default interpolates $LNBENCH_DATA_DIR, which the constructor's None reads too
        # norm: a NormConfig node in the schema (lnbench.nn.normalizers), not a plain value
        assert p.name in defaults, f"{name}: {p.name} has no schema field"
        if p.default is not inspect.Parameter.empty and p.name not in ("norm", "data_dir"):
            default = list(p.default) if isinstance(p.default, tuple) else getattr(p.default, "value", p.default)
            assert default == defaults[p.name], (name, p.name)


@pytest.mark.parametrize("name,schema", list(SCHEMAS["dataset"].items()))
def test_every_dataset_argument_can_be_set_from_the_command_line(name, schema):
    params = inspect.signature(get_class(schema._target_).__init__).parameters
    fields = {f.name for f in dataclasses.fields(schema)}
    assert {p for p, v in params.items() if v.kind is v.KEYWORD_ONLY or p not in ("self", "kwargs")} - {
        "self",
        "kwargs",
    } <= fields
