"""Typed JSON objects that round-trip byte-exact: the base of every payload (DESIGN.md §3–§4).

A `Struct` subclass is a dataclass whose fields map to wire keys. Reading keeps unknown keys in
`extra` and remembers which required keys were missing, so `to_data(from_data(d)) == d` for any
object `d` read from disk; `?`-fields (listed in OPTIONAL) are omitted when None.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, ClassVar, Self

from runfold.core.canonical import Json
from runfold.core.errors import invalid_args


@dataclasses.dataclass(frozen=True)
class _FieldPlan:
    name: str
    wire: str
    optional: bool
    struct: type[Struct] | None
    is_list_of_struct: bool
    primitive: tuple[type, ...] | None


def _plan_for(tp: Any) -> tuple[type[Struct] | None, bool, tuple[type, ...] | None]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _plan_for(args[0])
        return None, False, None
    if isinstance(tp, type) and issubclass(tp, Struct):
        return tp, False, None
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if isinstance(item, type) and issubclass(item, Struct):
            return item, True, None
        return None, False, (list,)
    if origin is dict:
        return None, False, (dict,)
    if tp is str:
        return None, False, (str,)
    if tp is bool:
        return None, False, (bool,)
    if tp is int:
        return None, False, (int,)
    return None, False, None


@dataclasses.dataclass(kw_only=True)
class Struct:
    """Base for typed wire objects. Subclasses are `@dataclass(kw_only=True)`.

    Class attributes: OPTIONAL (python names of `?`-fields), WIRE (python name → wire key when
    they differ, e.g. `from_` → `from`).
    """

    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    WIRE: ClassVar[dict[str, str]] = {}
    _PLANS: ClassVar[dict[type, tuple[_FieldPlan, ...]]] = {}

    extra: dict[str, Json] = dataclasses.field(default_factory=dict, repr=False)
    """Keys this build does not know, kept verbatim."""
    absent: frozenset[str] = dataclasses.field(default=frozenset(), repr=False, compare=False)
    """Required fields that were missing on read; omitted again on write."""

    @classmethod
    def _plans(cls) -> tuple[_FieldPlan, ...]:
        plans = Struct._PLANS.get(cls)
        if plans is None:
            hints = typing.get_type_hints(cls)
            built = []
            for f in dataclasses.fields(cls):
                if f.name in ("extra", "absent"):
                    continue
                struct, is_list, prim = _plan_for(hints[f.name])
                built.append(
                    _FieldPlan(
                        f.name, cls.WIRE.get(f.name, f.name), f.name in cls.OPTIONAL, struct, is_list, prim
                    )
                )
            plans = tuple(built)
            Struct._PLANS[cls] = plans
        return plans

    @classmethod
    def from_data(cls, data: Json, path: str = "data") -> Self:
        """Read a wire object. Raises `E_INVALID_ARGS` naming the field path when a known key
        has the wrong JSON type or `data` is not an object."""
        if not isinstance(data, dict):
            raise invalid_args("read object", path, "this field must be a JSON object")
        kwargs: dict[str, Any] = {}
        missing = []
        plans = cls._plans()
        for plan in plans:
            if plan.wire not in data:
                if not plan.optional:
                    missing.append(plan.name)
                continue
            value = data[plan.wire]
            sub = f"{path}.{plan.wire}"
            if value is None and plan.optional:
                kwargs[plan.name] = None
                continue
            if plan.struct is not None:
                if plan.is_list_of_struct:
                    if not isinstance(value, list):
                        raise invalid_args("read list", sub, "this field must be a JSON array")
                    value = [plan.struct.from_data(v, f"{sub}[{i}]") for i, v in enumerate(value)]
                else:
                    value = plan.struct.from_data(value, sub)
            elif plan.primitive is not None and (
                not isinstance(value, plan.primitive)
                or (plan.primitive == (int,) and isinstance(value, bool))
            ):
                want = plan.primitive[0].__name__
                raise invalid_args(
                    "read field", sub, f"this field must be a JSON {_JSON_NAMES.get(want, want)}"
                )
            kwargs[plan.name] = value
        known = {p.wire for p in plans}
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs, extra=extra, absent=frozenset(missing))

    def to_data(self) -> dict[str, Json]:
        """The wire object: known fields (minus absent ones and None `?`-fields) plus `extra`."""
        out: dict[str, Json] = {}
        for plan in self._plans():
            if plan.name in self.absent:
                continue
            value = getattr(self, plan.name)
            if value is None and plan.optional:
                continue
            if plan.struct is not None and value is not None:
                value = [v.to_data() for v in value] if plan.is_list_of_struct else value.to_data()
            out[plan.wire] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out


_JSON_NAMES = {"str": "string", "int": "integer", "bool": "boolean", "list": "array", "dict": "object"}
