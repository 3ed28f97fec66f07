"""Model SPEC strings → providers: the one parser the CLI, the config file and the API share (issue 4).

SPEC forms: `local` (the embedded model), `anthropic:<model>`, `openai:<model>`,
`openai-responses:<model>`, `openai-compat:<model>@<base-url>`, `script:<file>[#<dialect>]`.
Provider modules are imported lazily so the core stays light and a missing SDK is one clear error.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
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


def provider_from_spec(
    spec: str,
    *,
    workspace_config: Mapping[str, Any] | None = None,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Provider:
    """The provider a SPEC names (see the module docstring).

    `workspace_config`: the parsed `.runfold/config.toml` (provider settings such as
    `[providers.<family>]` tables are passed to the provider's constructor as keyword arguments);
    `base_dir`: where a relative `script:` path is resolved (default: the current directory);
    `env`: where keys/base URLs are read (default `os.environ`; the SDKs read them too).
    Raises `E_INVALID_ARGS` listing the valid forms for a malformed SPEC, `E_PATH_NOT_FOUND` for
    a missing script, `E_CONFIG_INVALID` when the provider's package is not installed.
    """
    family, model, extra = parse_spec(spec)
    env = os.environ if env is None else env
    settings: dict[str, Any] = {}
    if workspace_config:
        table = workspace_config.get("providers", {})
        if isinstance(table, Mapping) and isinstance(table.get(family), Mapping):
            settings = dict(table[family])
    try:
        return _build(spec, family, model, extra, settings, env, base_dir)
    except TypeError as exc:  # a [providers.<family>] key the provider does not take
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID,
            f"set up the provider for {spec!r} ({exc})",
            f"config.toml [providers.{family}] " + ", ".join(sorted(settings)),
            "remove the settings this provider does not take (see its documentation)",
        ) from None


def _build(
    spec: str,
    family: str,
    model: str,
    extra: str | None,
    settings: dict[str, Any],
    env: Mapping[str, str],
    base_dir: Path | None,
) -> Provider:
    if family == "script":
        from runfold.providers.scripted import ScriptedProvider

        path = Path(model)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return ScriptedProvider.from_file(path, dialect=extra, **settings)
    if family == "local":
        cls = _load("local", "LocalProvider", spec)
        provider: Provider = cls(model=model or None, **settings)
        return provider
    if family == "anthropic":
        cls = _load("anthropic", "AnthropicProvider", spec)
        made1: Provider = cls(
            model=model,
            api_key=env.get("ANTHROPIC_API_KEY"),
            base_url=env.get("ANTHROPIC_BASE_URL"),
            **settings,
        )
        return made1
    if family == "openai":
        cls = _load("openai_chat", "OpenAIChatProvider", spec)
        made2: Provider = cls(
            model=model, api_key=env.get("OPENAI_API_KEY"), base_url=env.get("OPENAI_BASE_URL"), **settings
        )
        return made2
    if family == "openai-responses":
        cls = _load("openai_responses", "OpenAIResponsesProvider", spec)
        made3: Provider = cls(
            model=model, api_key=env.get("OPENAI_API_KEY"), base_url=env.get("OPENAI_BASE_URL"), **settings
        )
        return made3
    assert family == "openai-compat"
    cls = _load("compat", "OpenAICompatProvider", spec)
    made4: Provider = cls(model=model, base_url=extra, api_key=env.get("OPENAI_API_KEY"), **settings)
    return made4
