"""Every key's domain, declared beside the key in lnbench/config/schema.py: the values a run may take.

A type says int, float, bool, an enum or text; `ranged` adds the range of a number (eps > 0, momentum in [0, 1)),
of each number of a list (hidden sizes >= 1), and `text` that a name may not be empty. lnbench.config.validate
checks them all before anything runs, one paragraph per refusal; tests/config/test_domains.py walks every key of
the schema with a value outside its domain. What a domain cannot say alone (a size that must fit the data, a
batch of 1 under batch normalization) is checked where both values are known (validate's combinations, each
dataset's own checks when preflight builds it).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Iterator

from lnbench.nn.normalizers import NormConfig

DOMAIN = "lnbench_domain"  # the key of a field's metadata


@dataclass(frozen=True)
class Range:
    """low <= x <= high (or < where open); `why` replaces the generic text where a key has its own reason."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    each: bool = False  # a list: each of its numbers
    why: str = ""

    def holds(self, value: Any) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def text(self, integer: bool) -> str:
        if self.why:
            return self.why
        bounds = [
            f"{'>' if self.low_open else '>='} {_num(self.low)}" if self.low is not None else "",
            f"{'<' if self.high_open else '<='} {_num(self.high)}" if self.high is not None else "",
        ]
        said = " and ".join(b for b in bounds if b)
        if integer:
            return f"it must be an integer {said}"
        return f"it must be {said}" if all(bounds) else f"it must be a number {said}"

    def outside(self, integer: bool) -> Any:
        """A value just outside (for the tests that walk every key)."""
        if self.low is not None:
            return self.low if self.low_open else self.low - 1
        step = 1 if integer else 0.5
        return self.high if self.high_open else self.high + step


@dataclass(frozen=True)
class Text:
    """Text that names something: it may not be empty."""

    why: str = "it must not be empty"

    def holds(self, value: Any) -> bool:
        return value is None or bool(str(value).strip())

    def text(self, integer: bool = False) -> str:
        return self.why

    def outside(self, integer: bool = False) -> Any:
        return ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def ranged(default: Any = dataclasses.MISSING, *, factory: Any = None, **bounds: Any) -> Any:
    """A dataclass field with its range: `eps: float = ranged(1e-8, low=0, low_open=True)`."""
    meta = {DOMAIN: Range(**bounds)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def text(default: Any, why: str = "") -> Any:
    return field(default=default, metadata={DOMAIN: Text(why) if why else Text()})


def declared(schema: type, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(key, its type hint, its domain or None) of every field of `schema`, nested dataclasses' included."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        hint = hints.get(f.name, Any)
        inner = innermost(hint)
        if dataclasses.is_dataclass(inner):
            yield from declared(inner, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", hint, f.metadata.get(DOMAIN)


def innermost(hint: Any) -> Any:
    """Optional[X] and X | None -> X."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1 else hint


def outside_domain(values: list[tuple[str, Any, Any]]) -> list[str]:
    """The refusals of `values` (key, value, domain), in order: 'KEY=VALUE is not allowed: WHY.'"""
    out = []
    for key, value, domain in values:
        if domain is None or value is None:
            continue
        if isinstance(domain, Range):
            items = list(enumerate(value)) if domain.each and isinstance(value, (list, tuple)) else [(None, value)]
            for i, v in items:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or domain.holds(v):
                    continue
                shown = key if i is None else f"{key}[{i}]"
                out.append(f"{shown}={v} is not allowed: {domain.text(isinstance(v, int))}.")
        elif not domain.holds(value):
            out.append(f"{key}={value!r} is not allowed: {domain.text()}.")
    return out


@dataclass
class NormSchema(NormConfig):
    """The normalizer's config (lnbench.nn.normalizers.NormConfig, below the config layer, which this module
    sits in) as the model schemas type it, with its numbers' domains; NormConfig's defaults, the one copy."""

    eps: float = ranged(NormConfig.eps, low=0, low_open=True)
    momentum: float = ranged(NormConfig.momentum, low=0, high=1)  # BN's running statistics: 0 keeps, 1 replaces
    groups: int = ranged(NormConfig.groups, low=1)
