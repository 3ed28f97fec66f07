"""Secrets kept out of a run's lines: every line a run writes passes here before it is staged.

The run's redactor knows the secrets of the environment runfold runs in and the provider's own
key (`core.secrets`); a line holding one is written with it replaced, preceded by a
`secret_captured` line saying where and how many, never the value. The conversation is folded
from the written lines, so the next request sends the redacted text too and replay stays exact.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

from runfold.core.payloads import Payload, SecretCaptured
from runfold.core.secrets import Redaction, Redactor, redactor_for

P = TypeVar("P", bound=Payload)


def provider_credentials(provider: Any) -> list[tuple[str, str]]:
    """(name, value) of the credentials a provider holds (its optional `credentials()`), e.g.
    `[("OPENAI_API_KEY", "sk-…")]`; none for a provider without that method."""
    get = getattr(provider, "credentials", None)
    if get is None:
        return []
    return [(str(name), str(value)) for name, value in get() if value]


def run_redactor(provider: Any, env: Mapping[str, str] | None = None) -> Redactor:
    """The redactor of a run: the secrets of `env` (None: this process's environment, read now)
    and the provider's credentials."""
    return redactor_for(os.environ if env is None else env, provider_credentials(provider))


def redact_payload(redactor: Redactor, payload: P) -> tuple[P, SecretCaptured | None]:
    """`payload` with its secrets replaced (the same object when it holds none) and the
    `secret_captured` line to write before it (None when nothing was replaced). `where` names
    the fields as `<kind>.<field>...` (`tool_result.result.stdout`)."""
    if isinstance(payload, SecretCaptured):
        return payload, None
    found = Redaction()
    clean = redactor.redact(payload.to_data(), payload.KIND.value, found)
    if not found:
        return payload, None
    captured = SecretCaptured(where=sorted(found.where), count=found.count, names=sorted(found.names))
    return type(payload).from_data(clean), captured
