"""The context window's budgets, pure (DESIGN.md §10): how the model's window is shared among
regions, when a large tool result leaves the window for the content store, and which compaction
strategies a run may use, cheapest first.

`ContextSettings` is what `[context]` of config.toml says; `Budgets` is that applied to one
model's window in tokens. Both are checked when built, so a run never starts with budgets that do
not add up or a window smaller than its frozen prefix; a prefix larger than only its `system` share
takes the difference from the conversation (one rule, `budgets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final, Literal

from runfold.core.errors import ErrorCode, RunfoldError

Region = Literal["system", "conversation", "notes", "todo", "scratch"]
"""The regions of a window with a budget of their own (wire names, pinned). `system` is the frozen
prefix: the system segments and the tool table."""
REGIONS: Final[tuple[Region, ...]] = ("system", "conversation", "notes", "todo", "scratch")

Strategy = Literal["clear_tool_results", "summary"]
"""Compaction strategies (wire names, pinned), cheapest first: `clear_tool_results` replaces the
bodies of old tool results with a short marker, keeping each call paired with its result;
`summary` replaces older exchanges with a runtime summary made by a model call on the ledger."""
STRATEGIES: Final[tuple[Strategy, ...]] = ("clear_tool_results", "summary")

PER_MILLE: Final = 1000


@dataclass(frozen=True)
class ContextSettings:
    """`[context]` of config.toml; every share is per-mille of the model's context window.

    - `system_permille` … `scratch_permille`: each region's share; together at most 1000;
    - `offload_bytes`: a tool result larger than this (bytes of its JSON text) is stored whole in
      the content store and the window gets its first `offload_head_bytes` bytes and a locator;
    - `compaction`: the strategies a run may use, in the order tried (empty: never compact);
    - `keep_waves`: the most recent tool waves whose results are never cleared or summarised;
    - `reminders_permille`: the shares of the conversation budget left at which the model gets
      a runtime reminder (descending, each in 1..999).
    """

    system_permille: int = 200
    conversation_permille: int = 650
    notes_permille: int = 50
    todo_permille: int = 50
    scratch_permille: int = 50
    offload_bytes: int = 16384
    offload_head_bytes: int = 1024
    compaction: tuple[Strategy, ...] = STRATEGIES
    keep_waves: int = 2
    reminders_permille: tuple[int, ...] = (250, 100)

    def share(self, region: Region) -> int:
        """The per-mille share of `region`."""
        value: int = getattr(self, f"{region}_permille")
        return value


CONTEXT_KEYS: Final[tuple[str, ...]] = tuple(f.name for f in fields(ContextSettings))


@dataclass(frozen=True)
class Budgets:
    """One model's window split by `ContextSettings`, in tokens: `window` (the model's context
    window), `output` (tokens reserved for the reply), `region` → its budget (its share of the
    usable input `window - output`), and `prefix`: the frozen prefix's tokens.

    The one prefix rule (DESIGN.md §10): a prefix larger than its `system` share is not refused;
    it takes the difference from the conversation, whose budget (`conversation`) is its share,
    at most what the prefix leaves of the input. Only a prefix larger than the whole input window
    is refused (`budgets`)."""

    window: int
    output: int
    regions: Mapping[Region, int]
    prefix: int = 0

    @property
    def input(self) -> int:
        return self.window - self.output

    @property
    def conversation(self) -> int:
        """The conversation's budget (tokens): its share, at most `input - prefix`."""
        return min(self.regions["conversation"], self.input - self.prefix)

    @property
    def prefix_over_share(self) -> str | None:
        """When the prefix is larger than its `system` share, one sentence saying so and what the
        conversation keeps (never a refusal); None when it fits its share."""
        system = self.regions["system"]
        if self.prefix <= system:
            return None
        return (
            f"the frozen prefix takes {self.prefix} tokens, more than its system budget ({system} tokens); "
            f"the difference is taken from the rest of the window, the conversation keeps "
            f"{self.conversation} tokens (raise context.system_permille to make it explicit)"
        )


def _bad(key: str, subject: str, recovery: str, nearby: tuple[str, ...] = ()) -> RunfoldError:
    return RunfoldError(ErrorCode.CONFIG_INVALID, f"read the setting {key}", subject, recovery, nearby)


def _whole(key: str, value: Any, where: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"from {low} to {high}" if high is not None else f"≥ {low}"
        raise _bad(f"context.{key}", where, f"give a whole number {span}")
    return value


def parse_context(table: Mapping[str, Any], where: str = "config.toml") -> ContextSettings:
    """Check a parsed `[context]` table and return it typed (absent keys take the defaults).

    Raises `E_CONFIG_INVALID` naming `context.<key>`: an unknown key, a wrong type, a share
    outside 0..1000, shares adding up to more than 1000 (the sum is named), an unknown strategy,
    a head larger than the offload size, reminders not descending within 1..999."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in CONTEXT_KEYS:
            raise _bad(f"context.{key}", where, f"the keys allowed here are: {', '.join(CONTEXT_KEYS)}", CONTEXT_KEYS)
        if key.endswith("_permille") and key != "reminders_permille":
            values[key] = _whole(key, value, where, 0, PER_MILLE)
        elif key in ("offload_bytes", "offload_head_bytes"):
            values[key] = _whole(key, value, where, 1)
        elif key == "keep_waves":
            values[key] = _whole(key, value, where, 0)
        elif key == "compaction":
            if not isinstance(value, list) or any(s not in STRATEGIES for s in value) or len(set(value)) != len(value):
                raise _bad("context.compaction", where, f"give a list of distinct strategies from: {', '.join(STRATEGIES)}", STRATEGIES)
            values[key] = tuple(value)
        else:  # reminders_permille
            if not isinstance(value, list):
                raise _bad("context.reminders_permille", where, "give a list of shares left, e.g. [250, 100]")
            shares = [_whole("reminders_permille", v, where, 1, PER_MILLE - 1) for v in value]
            if shares != sorted(set(shares), reverse=True):
                raise _bad("context.reminders_permille", where, "list the shares once each, largest first, e.g. [250, 100]")
            values[key] = tuple(shares)
    settings = ContextSettings(**values)
    total = sum(settings.share(r) for r in REGIONS)
    if total > PER_MILLE:
        parts = " + ".join(f"{r} {settings.share(r)}" for r in REGIONS)
        raise _bad(
            "context.*_permille",
            where,
            f"the region shares add up to {total}‰ ({parts}), more than the whole window (1000‰); lower some",
        )
    if settings.offload_head_bytes > settings.offload_bytes:
        raise _bad(
            "context.offload_head_bytes",
            where,
            f"keep the head ({settings.offload_head_bytes} bytes) at most the offload size ({settings.offload_bytes} bytes)",
        )
    return settings


def budgets(settings: ContextSettings, window: int, output: int, prefix_tokens: int, model: str) -> Budgets:
    """`settings` applied to a model whose context window is `window` tokens with `output` tokens
    reserved for its reply, for a run whose frozen prefix takes `prefix_tokens` — the one rule the
    run loop, `why` and the config check share (see `Budgets`).

    Raises `E_CONFIG_INVALID` (before the run starts) naming the key and the sizes when the
    window is not larger than the reply reserve, or the frozen prefix alone does not fit the
    input window. A prefix larger than only its `system` share is said by
    `Budgets.prefix_over_share`, not refused."""
    if window <= output or window < 1:
        raise _bad(
            f'models."{model}".context_window',
            f"model {model}",
            f"the window ({window} tokens) must be larger than the reply reserve ({output} tokens); "
            "set context_window or max_output_tokens for this model",
        )
    usable = window - output
    regions = {r: usable * settings.share(r) // PER_MILLE for r in REGIONS}
    if prefix_tokens >= usable:
        raise _bad(
            f'models."{model}".context_window',
            f"model {model}",
            f"the frozen prefix alone takes {prefix_tokens} tokens, the whole of the model's input window or more "
            f"({usable} = {window} - {output} reserved for the reply); use a model with a larger window "
            "or fewer tools / a shorter system text",
        )
    return Budgets(window, output, regions, max(0, prefix_tokens))
