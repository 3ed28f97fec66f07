"""Model SPEC strings → providers: the one parser the CLI, the config file and the API share.

SPEC forms: `local` (the embedded model), `anthropic:<model>`, `openai:<model>`,
`openai-responses:<model>`, `openai-compat:<model>@<base-url>`, `script:<file>[#<dialect>]`.
Provider modules are imported lazily so the core stays light and a missing SDK is one clear error.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.render import DIALECTS
from runfold.providers.base import Provider

SPEC_FORMS: tuple[str, ...] = (
    "local",
    "anthropic:<model>",
    "openai:<model>",
    "openai-responses:<model>",
    "openai-compat:<model>@<base-url>",
    "script:<file>[#<dialect>]",
)
"""The valid SPEC forms, as error messages list them."""

DEFAULT_SPEC = "local"


def _bad(spec: str, why: str) -> RunfoldError:
    return invalid_args(
        f"choose the model {spec!r} ({why})",
        "--model / model=",
        "use one of: " + ", ".join(SPEC_FORMS),
        SPEC_FORMS,
    )


def _load(module: str, cls: str, spec: str) -> Any:
    """The provider class `cls` of `runfold.providers.<module>`; E_CONFIG_INVALID when its
    module or SDK is not installed."""
    try:
        mod = importlib.import_module(f"runfold.providers.{module}")
    except ImportError as exc:
        extra = "local" if module == "local" else "providers"
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID,
            f"load the provider for {spec!r} ({exc})",
            f"runfold.providers.{module}",
            f"install what it needs: pip install 'runfold[{extra}]'",
        ) from None
    found = getattr(mod, cls, None)
    if found is None:
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID,
            f"load the provider for {spec!r}",
            f"runfold.providers.{module}.{cls}",
            "this runfold build lacks that provider; upgrade runfold",
        )
    return found


def parse_spec(spec: str) -> tuple[str, str, str | None]:
    """`(family, model, extra)` of a SPEC: family is `local`, `anthropic`, `openai`,
    `openai-responses`, `openai-compat` or `script`; `extra` is the base URL (compat) or the
    dialect (script). Raises `E_INVALID_ARGS` listing the valid forms."""
    text = spec.strip()
    if not text:
        raise _bad(spec, "empty")
    if text == "local" or text.startswith("local:"):
        if text.endswith(":"):
            raise _bad(spec, "no model name after `local:`; `local` alone is the embedded model")
        return "local", text.partition(":")[2], None
    family, sep, rest = text.partition(":")
    if not sep:
        raise _bad(spec, "no provider prefix")
    if family == "script":
        path, _, dialect = rest.partition("#")
        if not path:
            raise _bad(spec, "no script file")
        if dialect and dialect not in DIALECTS:
            raise invalid_args(
                f"choose the scripted model's dialect {dialect!r}",
                spec,
                "use one of: " + ", ".join(DIALECTS),
                DIALECTS,
            )
        return "script", path, dialect or None
    if family in ("anthropic", "openai", "openai-responses"):
        if not rest:
            raise _bad(spec, "no model name")
        return family, rest, None
    if family == "openai-compat":
        model, at, url = rest.partition("@")
        if not model or not at or not url.startswith(("http://", "https://")):
            raise _bad(spec, "openai-compat needs <model>@<http(s) base URL>")
        return family, model, url
    raise _bad(spec, f"unknown provider {family!r}")


@dataclass(frozen=True)
class SdkSection:
    """`[providers.anthropic|openai|openai-responses|openai-compat]`: the call settings
    (`CallSettings`) and `timeout_s` (seconds the SDK waits); None: the provider's default."""

    max_tokens: int | None = None
    stream: bool | None = None
    thinking: dict[str, Any] | None = None
    temperature_milli: int | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class ScriptSection:
    """`[providers.script]`: `model` (recorded as `model_called.model`) and the call settings;
    None: the recording's header, else the defaults."""

    model: str | None = None
    max_tokens: int | None = None
    stream: bool | None = None
    thinking: dict[str, Any] | None = None
    temperature_milli: int | None = None


@dataclass(frozen=True)
class LocalSection:
    """`[providers.local]`: `max_tokens`, `n_ctx` (context window, tokens), `seed`, `n_threads`
    (see `LocalProvider`); None: the provider's default."""

    max_tokens: int | None = None
    n_ctx: int | None = None
    seed: int | None = None
    n_threads: int | None = None


ProviderSection = SdkSection | ScriptSection | LocalSection
"""One checked `[providers.<family>]` table."""

SECTIONS: dict[str, type[ProviderSection]] = {
    "local": LocalSection,
    "anthropic": SdkSection,
    "openai": SdkSection,
    "openai-responses": SdkSection,
    "openai-compat": SdkSection,
    "script": ScriptSection,
}
"""Provider family → the typed `[providers.<family>]` section it takes (its keys: the fields)."""

_CLASSES: dict[str, tuple[str, str]] = {
    "local": ("local", "LocalProvider"),
    "anthropic": ("anthropic", "AnthropicProvider"),
    "openai": ("openai_chat", "OpenAIChatProvider"),
    "openai-responses": ("openai_responses", "OpenAIResponsesProvider"),
    "openai-compat": ("compat", "OpenAICompatProvider"),
}
"""Provider family → (module under `runfold.providers`, class), imported when first used."""


def section_kwargs(section: ProviderSection | None) -> dict[str, Any]:
    """The keys a section sets (None fields left out), as constructor keyword arguments."""
    if section is None:
        return {}
    return {f.name: v for f in fields(section) if (v := getattr(section, f.name)) is not None}


def provider_from_spec(
    spec: str,
    *,
    sections: Mapping[str, ProviderSection] | None = None,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Provider:
    """The provider a SPEC names (see the module docstring).

    `sections`: family → the checked `[providers.<family>]` of config.toml, passed to the
    provider's constructor as keyword arguments; `base_dir`: where a relative `script:` path is
    resolved (default: the current directory); `env`: where keys are read (default
    `os.environ`; `ANTHROPIC_BASE_URL`/`OPENAI_BASE_URL` too, the compat base URL comes from
    the SPEC). Raises `E_INVALID_ARGS` listing the valid forms for a malformed SPEC,
    `E_PATH_NOT_FOUND` for a missing script, `E_CONFIG_INVALID` when the provider's package is
    not installed.
    """
    family, model, extra = parse_spec(spec)
    env = os.environ if env is None else env
    kwargs = section_kwargs((sections or {}).get(family))
    if family == "script":
        from runfold.providers.scripted import ScriptedProvider

        path = Path(model)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return ScriptedProvider.from_file(path, dialect=extra, **kwargs)
    cls = _load(*_CLASSES[family], spec)
    if family == "local":
        local: Provider = cls(model=model or None, **kwargs)
        return local
    base_url = extra if family == "openai-compat" else env.get(cls.BASE_URL_ENV)
    made: Provider = cls(model=model, api_key=env.get(cls.KEY_ENV), base_url=base_url, **kwargs)
    return made
