"""JSON that keeps every number's original spelling, for text that arrives from outside.

A model's tool-call arguments (from a provider or from an imported session file) are stored as
their JSON text (DESIGN.md §3): parsing with `loads_exact` and printing with `dumps_exact`
gives back the same numbers (`1.50` stays `1.50`), so no float ever passes through Python.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ExactNumber(str):
    """A JSON number kept as its source text."""


def loads_exact(raw: bytes | str) -> Any:
    """Parse JSON keeping every number's original spelling (see `dumps_exact`). Raises
    `json.JSONDecodeError` (a `ValueError`) on malformed text."""
    return json.loads(raw, parse_float=ExactNumber, parse_int=ExactNumber)


def dumps_exact(value: Any) -> str:
    """Compact JSON of a value from `loads_exact`: numbers written as they arrived (so `1.50`
    stays `1.50`), strings as raw UTF-8, keys in their original order."""
    if isinstance(value, ExactNumber):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{dumps_exact(str(k))}:{dumps_exact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dumps_exact(v) for v in value) + "]"
    return json.dumps(value)
