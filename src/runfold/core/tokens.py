"""Token figures and context windows, pure (DESIGN.md §10): how many tokens a request takes, said
together with the method that produced the figure, and how large each model's window is.

The window manager needs real counts, not bytes/4; a tokenizer or the provider's own counter
gives them (`runfold.providers.tokens`), and when neither can, a ratio calibrated on the run's own
billed input tokens does, in integers only (a ledger holds no floats).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from runfold.core.errors import ErrorCode, RunfoldError

TokenMethod = Literal["tokenizer", "provider_count", "calibrated", "estimate"]
"""How a token figure was produced (wire names, pinned): `tokenizer` — the model's own tokenizer
ran here; `provider_count` — the provider's count endpoint answered; `calibrated` — request bytes
times the ratio billed on this run's earlier calls; `estimate` — bytes/4 rounded up."""
TOKENIZER: Final = "tokenizer"
PROVIDER_COUNT: Final = "provider_count"
CALIBRATED: Final = "calibrated"
ESTIMATE: Final = "estimate"
TOKEN_METHODS: Final[tuple[TokenMethod, ...]] = (TOKENIZER, PROVIDER_COUNT, CALIBRATED, ESTIMATE)

CL100K: Final = "cl100k_base"
O200K: Final = "o200k_base"
ENCODINGS: Final[tuple[str, ...]] = (CL100K, O200K)
"""The OpenAI BPE encodings counted offline (`runfold.providers.tokens`)."""


@dataclass(frozen=True)
class TokenCount:
    """A token figure for one request.

    `tokens`: ≥ 0; `method`: a `TokenMethod`; `source`: what produced it (an encoding name, the
    model's tokenizer, the provider's endpoint, the ratio used, `bytes/4`); `fallback`: why a
    better method was not used (None when none was tried and failed)."""

    tokens: int
    method: TokenMethod
    source: str
    fallback: str | None = None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"method": self.method, "source": self.source, "tokens": self.tokens}
        if self.fallback is not None:
            data["fallback"] = self.fallback
        return data


# -- the estimate and its calibration ------------------------------------------------------------


def estimate_tokens(n_bytes: int) -> int:
    """Estimated tokens for `n_bytes` bytes: ceil(n_bytes / 4) (the `estimate` method)."""
    return (n_bytes + 3) // 4


@dataclass(frozen=True)
class Calibration:
    """Tokens per byte learnt from billed calls: `per_mille` tokens per 1000 request bytes
    (rounded half up), over `samples` calls totalling `bytes` request bytes and `tokens` billed
    prompt tokens."""

    per_mille: int
    bytes: int
    tokens: int
    samples: int


def window_tokens(usage: Mapping[str, Any]) -> int:
    """The prompt tokens a call's `usage` (the `model_returned.usage` shape: input, cache_read,
    cache_write) says its request took: input + cache_read + cache_write, since runfold's
    `input` excludes the cached tokens for every provider. Missing or non-integer fields count 0."""
    total = 0
    for key in ("input", "cache_read", "cache_write"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total


def calibrate(pairs: Iterable[tuple[int, int]]) -> Calibration | None:
    """The ratio of billed prompt tokens to request bytes over `pairs` of (request bytes, billed
    prompt tokens — see `window_tokens`), as integer per-mille. Pairs with no bytes or no tokens
    are not evidence and are skipped; None when none is left."""
    n_bytes = n_tokens = samples = 0
    for size, tokens in pairs:
        if size > 0 and tokens > 0:
            n_bytes += size
            n_tokens += tokens
            samples += 1
    if not samples:
        return None
    per_mille = (2 * 1000 * n_tokens + n_bytes) // (2 * n_bytes)
    return Calibration(max(1, per_mille), n_bytes, n_tokens, samples)


def calibrated_tokens(n_bytes: int, per_mille: int) -> int:
    """`n_bytes` × `per_mille` / 1000 rounded up: integer, never negative, monotone in bytes."""
    return max(0, (max(0, n_bytes) * max(0, per_mille) + 999) // 1000)


def estimate(n_bytes: int, calibration: Calibration | None = None, fallback: str | None = None) -> TokenCount:
    """Tokens for a request of `n_bytes` bytes without a tokenizer: `calibrated` when the run has
    billed calls to learn from, else `estimate` (bytes/4 rounded up, the figure `why` shows).
    `fallback` says why no tokenizer or provider count was used."""
    if calibration is not None:
        return TokenCount(
            calibrated_tokens(n_bytes, calibration.per_mille),
            CALIBRATED,
            f"{calibration.per_mille}‰ tokens per byte over {calibration.samples} billed calls",
            fallback,
        )
    return TokenCount(estimate_tokens(max(0, n_bytes)), ESTIMATE, "bytes/4", fallback)


# -- context windows -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelLimits:
    """What a model can hold: `context_window` tokens in all (prompt and output), at most
    `max_output_tokens` of them output (None: not known), and for OpenAI models the BPE
    `encoding` that counts them (None: no offline tokenizer)."""

    context_window: int
    max_output_tokens: int | None = None
    encoding: str | None = None


MODEL_KEYS: Final[tuple[str, ...]] = ("context_window", "max_output_tokens", "encoding")
"""The keys of a `[models."<name>"]` table."""


def _m(window: int, output: int | None, encoding: str | None = None) -> ModelLimits:
    return ModelLimits(window, output, encoding)


MODELS: Mapping[str, ModelLimits] = {
    # Anthropic: standard context window, synchronous max output (model overview pages)
    "claude-opus-5": _m(1_000_000, 128_000),
    "claude-sonnet-5": _m(1_000_000, 128_000),
    "claude-opus-4-8": _m(1_000_000, 128_000),
    "claude-opus-4-7": _m(1_000_000, 128_000),
    "claude-opus-4-6": _m(1_000_000, 128_000),
    "claude-sonnet-4-6": _m(1_000_000, 128_000),
    "claude-opus-4-5": _m(200_000, 64_000),
    "claude-sonnet-4-5": _m(200_000, 64_000),
    "claude-haiku-4-5": _m(200_000, 64_000),
    "claude-opus-4-1": _m(200_000, 32_000),
    "claude-opus-4-0": _m(200_000, 32_000),
    "claude-opus-4": _m(200_000, 32_000),
    "claude-sonnet-4-0": _m(200_000, 64_000),
    "claude-sonnet-4": _m(200_000, 64_000),
    "claude-3-7-sonnet": _m(200_000, 64_000),
    "claude-3-5-haiku": _m(200_000, 8_192),
    # OpenAI: context window, max output tokens, encoding (tiktoken's model map)
    "gpt-5": _m(400_000, 128_000, O200K),
    "gpt-5-mini": _m(400_000, 128_000, O200K),
    "gpt-5-nano": _m(400_000, 128_000, O200K),
    "gpt-5.1": _m(400_000, 128_000, O200K),
    "gpt-4.1": _m(1_047_576, 32_768, O200K),
    "gpt-4.1-mini": _m(1_047_576, 32_768, O200K),
    "gpt-4.1-nano": _m(1_047_576, 32_768, O200K),
    "gpt-4o": _m(128_000, 16_384, O200K),
    "gpt-4o-mini": _m(128_000, 16_384, O200K),
    "o1": _m(200_000, 100_000, O200K),
    "o3": _m(200_000, 100_000, O200K),
    "o3-mini": _m(200_000, 100_000, O200K),
    "o4-mini": _m(200_000, 100_000, O200K),
    "gpt-4-turbo": _m(128_000, 4_096, CL100K),
    "gpt-4": _m(8_192, 8_192, CL100K),
    "gpt-3.5-turbo": _m(16_385, 4_096, CL100K),
    # the embedded model: `providers.local.DEFAULT_N_CTX` (the provider's own n_ctx wins)
    "smollm2-135m-instruct": _m(4_096, None),
}
"""The built-in table, keyed by the provider's model name like `providers.pricing.PRICES`
(dated snapshots resolve to it; see `model_limits`)."""

_SNAPSHOT = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")


def model_limits(model: str, table: Mapping[str, ModelLimits] | None = None) -> ModelLimits | None:
    """The limits of `model` in `table` (default: the built-in `MODELS`): the exact name first,
    then without a dated-snapshot or `-latest` suffix (`claude-sonnet-4-5-20250929` →
    `claude-sonnet-4-5`, `gpt-4o-2024-08-06` → `gpt-4o`), the rule `price_of` applies. None when
    unknown; no other prefix matching (`gpt-5.4` is not `gpt-5`)."""
    models = MODELS if table is None else table
    found = models.get(model)
    if found is None:
        found = models.get(_SNAPSHOT.sub("", model))
    return found


def _bad(key: str, recovery: str, nearby: tuple[str, ...] = ()) -> RunfoldError:
    return RunfoldError(
        ErrorCode.CONFIG_INVALID, f"read the setting {key}", "the [models] table", recovery, nearby
    )


def _whole(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(key, "give a whole number of tokens ≥ 1")
    return value


def merge_models(
    overrides: Mapping[str, Any], table: Mapping[str, ModelLimits] | None = None
) -> dict[str, ModelLimits]:
    """`table` (default: `MODELS`) with a parsed `[models."<name>"]` TOML table applied on top.

    Each entry may set `context_window` and `max_output_tokens` (whole numbers ≥ 1) and
    `encoding` (one of `ENCODINGS`); a known model keeps the fields an entry leaves out, a new
    one must set `context_window`. Raises `E_CONFIG_INVALID` naming the dotted key
    (`models."gpt-9".context_window`) for an entry that is not a table, an unknown key, a wrong
    type or value, a missing window, or an output limit above the window."""
    merged = dict(MODELS if table is None else table)
    for name, entry in overrides.items():
        where = f'models."{name}"'
        if not isinstance(entry, Mapping):
            raise _bad(where, "make it a table: context_window, max_output_tokens, encoding")
        for key in entry:
            if key not in MODEL_KEYS:
                raise _bad(
                    f"{where}.{key}", f"the keys allowed here are: {', '.join(MODEL_KEYS)}", MODEL_KEYS
                )
        base = merged.get(str(name))
        if base is None:
            if "context_window" not in entry:
                raise _bad(
                    f"{where}.context_window",
                    f"give the context window of {name}, a model runfold does not know",
                )
            base = ModelLimits(_whole(f"{where}.context_window", entry["context_window"]))
        changes: dict[str, Any] = {}
        if "context_window" in entry:
            changes["context_window"] = _whole(f"{where}.context_window", entry["context_window"])
        if "max_output_tokens" in entry:
            changes["max_output_tokens"] = _whole(f"{where}.max_output_tokens", entry["max_output_tokens"])
        if "encoding" in entry:
            encoding = entry["encoding"]
            if encoding not in ENCODINGS:
                raise _bad(f"{where}.encoding", f"use one of: {', '.join(ENCODINGS)}", ENCODINGS)
            changes["encoding"] = encoding
        limits = replace(base, **changes)
        if limits.max_output_tokens is not None and limits.max_output_tokens > limits.context_window:
            raise _bad(
                f"{where}.max_output_tokens",
                f"keep it at most the context window ({limits.context_window} tokens)",
            )
        merged[str(name)] = limits
    return merged
