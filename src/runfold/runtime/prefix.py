"""The frozen prefix of a run: system segments, the tool table and the call settings (DESIGN.md §8).

It is frozen once per run, stored whole in the CAS as one canonical JSON document and referenced
from `prompt_assembled.prefix`, so replay rebuilds every request offline even after the files or
Python tools it came from changed. Each segment's hash is re-checked before every send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from runfold.core import fold as fold_api
from runfold.core.canonical import content_hash, encode_json
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.locator import CasLocator, parse_locator
from runfold.core.messages import Message
from runfold.core.payloads import BytesRef, PromptAssembled, Segment
from runfold.core.regions import with_regions
from runfold.core.render import DIALECTS, RequestSpec, SystemSegment, ToolSpec, render, tools_bytes
from runfold.core.render.spec import check_dialect
from runfold.core.validate import validate
from runfold.providers.base import DEFAULT_MAX_TOKENS, CallSettings

if TYPE_CHECKING:
    from runfold.store.cas import Cas


PREFIX_FORMAT = 1
"""Version of the prefix document (`format` key); readers refuse a higher one."""

WORKSPACE_TEXT = (
    "You are an agent working on files in a workspace. Use the tools to look before you act, "
    "change only what the task needs, and end with a short final answer (no tool call) once the "
    "task is done."
)
"""The default text of the `workspace` segment (replaced by `system=` when given)."""


def room_text(room: str | None) -> str:
    """The `room` segment: where the run may write (DESIGN.md §9)."""
    where = f"`{room}`" if room else "the workspace root"
    return f"Your room is {where}: paths are relative to it and you may write only inside it."


def goal_text(goal: str) -> str:
    """The `run` segment: the goal of the run (empty goal → a blank segment, not sent)."""
    return f"Goal: {goal}" if goal.strip() else ""


@dataclass(frozen=True)
class Prefix:
    """A run's frozen prefix and call settings: what `render` needs besides the conversation.

    - `dialect`, `model`: the provider's dialect and model name;
    - `system`: the system segments in prompt order; `tools`: the tool table in order;
    - `max_tokens` (tokens), `thinking` (dialect keys, see `RequestSpec`), `cache_key` (OpenAI
      `prompt_cache_key`), `temperature_milli` (per-mille), `stream`.

    `document()` is the canonical bytes stored in the CAS; `Prefix.load` reads them back.
    """

    dialect: str
    model: str
    system: tuple[SystemSegment, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = DEFAULT_MAX_TOKENS
    thinking: dict[str, Any] | None = None
    cache_key: str | None = None
    temperature_milli: int | None = None
    stream: bool = False
    _doc: bytes = field(default=b"", compare=False, repr=False)

    # ---- the stored document -----------------------------------------------------------

    def document(self) -> bytes:
        """Canonical JSON (keys sorted, compact) of the whole prefix; the CAS object."""
        if not self._doc:
            obj: dict[str, Any] = {
                "format": PREFIX_FORMAT,
                "dialect": self.dialect,
                "model": self.model,
                "system": [{"slot": s.slot, "text": s.text, "edge": s.edge} for s in self.system],
                "tools": [_tool_obj(t) for t in self.tools],
                "max_tokens": self.max_tokens,
                "thinking": self.thinking,
                "cache_key": self.cache_key,
                "temperature_milli": self.temperature_milli,
                "stream": self.stream,
            }
            object.__setattr__(self, "_doc", encode_json(obj))
        return self._doc

    @classmethod
    def load(cls, document: bytes, where: str = "prefix") -> Prefix:
        """The prefix stored as `document`. Raises `E_LEDGER_CORRUPT` naming `where` and the
        field when it is not a prefix document this build reads."""
        try:
            obj = orjson.loads(document)
            if not isinstance(obj, dict):
                raise TypeError("not an object")
            if obj.get("format", 0) > PREFIX_FORMAT:
                raise RunfoldError(
                    ErrorCode.LOG_VERSION_UNSUPPORTED,
                    f"read prefix document format {obj.get('format')}",
                    where,
                    "upgrade runfold to read this prefix",
                )
            system = tuple(
                SystemSegment(str(s["slot"]), str(s["text"]), bool(s.get("edge", False)))
                for s in obj["system"]
            )
            tools = tuple(
                ToolSpec(str(t["name"]), str(t["description"]), dict(t["input_schema"]), t.get("strict"))
                for t in obj["tools"]
            )
            return cls(
                dialect=str(obj["dialect"]),
                model=str(obj["model"]),
                system=system,
                tools=tools,
                max_tokens=int(obj["max_tokens"]),
                thinking=obj.get("thinking"),
                cache_key=obj.get("cache_key"),
                temperature_milli=obj.get("temperature_milli"),
                stream=bool(obj.get("stream", False)),
            )
        except RunfoldError:
            raise
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise RunfoldError(
                ErrorCode.LEDGER_CORRUPT,
                f"read the frozen prefix document ({type(exc).__name__}: {exc})",
                where,
                "the CAS object is not a prefix document; restore .runfold/cas from a copy",
            ) from None

    # ---- what prompt_assembled records ---------------------------------------------------

    def segments(self) -> list[Segment]:
        """`prompt_assembled.segments`: `{slot, hash, len}` per segment (BLAKE3 of the UTF-8
        text, its length in bytes)."""
        out = []
        for s in self.system:
            raw = s.text.encode("utf-8")
            out.append(Segment(slot=s.slot, hash=content_hash(raw), len=len(raw)))
        return out

    def tools_ref(self) -> BytesRef:
        """`prompt_assembled.tools`: BLAKE3 and length in bytes of `tools_bytes(tools)`."""
        raw = tools_bytes(self.tools)
        return BytesRef(hash=content_hash(raw), bytes=len(raw))

    def check_against(self, segments: Sequence[Segment], tools: BytesRef | None, where: str) -> None:
        """Raise `E_WIRE_MISMATCH` naming the slot when this prefix's segment hashes or tool
        table differ from the recorded ones (re-checked before every send, DESIGN.md §8)."""
        mine = self.segments()
        if [(s.slot, s.hash, s.len) for s in mine] != [(s.slot, s.hash, s.len) for s in segments]:
            recorded = {s.slot: s.hash for s in segments}
            moved = [s.slot for s in mine if recorded.get(s.slot) != s.hash] or ["(segment list)"]
            raise RunfoldError(
                ErrorCode.WIRE_MISMATCH,
                f"send a request whose system segments differ from the frozen prefix ({', '.join(moved)})",
                where,
                "the prefix is frozen per run; start a new run (or fork) to change system text",
            )
        if tools is not None and self.tools_ref() != tools:
            raise RunfoldError(
                ErrorCode.WIRE_MISMATCH,
                "send a request whose tool table differs from the frozen prefix",
                where,
                "the tool table is frozen per run; start a new run (or fork) to change tools",
            )

    # ---- rendering ---------------------------------------------------------------------------

    def spec(
        self, messages: Sequence[Message], images: Mapping[str, str] | None = None, uncached_tail: int = 0
    ) -> RequestSpec:
        """The `RequestSpec` of a request with this prefix and `messages` (`uncached_tail`: see
        `RequestSpec`)."""
        return RequestSpec(
            model=self.model,
            system=self.system,
            tools=self.tools,
            messages=messages,
            max_tokens=self.max_tokens,
            cache_key=self.cache_key,
            thinking=self.thinking,
            stream=self.stream,
            temperature_milli=self.temperature_milli,
            images=dict(images or {}),
            uncached_tail=uncached_tail,
        )


def _tool_obj(t: ToolSpec) -> dict[str, Any]:
    obj: dict[str, Any] = {"name": t.name, "description": t.description, "input_schema": t.input_schema}
    if t.strict is not None:
        obj["strict"] = t.strict
    return obj


def stable_cache_key(system: Sequence[SystemSegment], tools: Sequence[ToolSpec]) -> str:
    """A `prompt_cache_key` stable for every run with the same system text and tools:
    `rf-` + the first 24 hex of BLAKE3 over both (DESIGN.md §8)."""
    parts = encode_json([[s.slot, s.text] for s in system]) + b"\n" + tools_bytes(tools)
    return "rf-" + content_hash(parts)[:24]


def build_prefix(
    *,
    dialect: str,
    model: str,
    tools: Sequence[ToolSpec],
    room: str | None,
    goal: str = "",
    system: str | None = None,
    settings: CallSettings | None = None,
    instructions: Sequence[SystemSegment] = (),
) -> Prefix:
    """The frozen prefix of a new run: segments `workspace` (the default text, or `system`),
    `room`, `run` (the goal; blank and not sent when there is none), then the tool table, and
    the provider's call `settings` (None: the defaults); the `instructions` segments (instruction
    files, `runtime.instructions`) come between `room` and `run`. `cache_key` is `stable_cache_key` of them. The prefix returned is read back from its own
    stored document (see `Prefix.load`), so live requests and replayed ones render alike."""
    settings = settings if settings is not None else CallSettings()
    segments = (
        SystemSegment("workspace", system if system is not None else WORKSPACE_TEXT, edge=True),
        SystemSegment("room", room_text(room), edge=True),
        *instructions,
        SystemSegment("run", goal_text(goal)),
    )
    built = Prefix(
        dialect=dialect,
        model=model,
        system=segments,
        tools=tuple(tools),
        max_tokens=settings.max_tokens,
        thinking=settings.thinking,
        cache_key=stable_cache_key(segments, tools),
        temperature_milli=settings.temperature_milli,
        stream=settings.stream,
    )
    # The live run renders from the stored document, read back, exactly as replay will: schema
    # key order (sorted in the document) is then the same on both sides.
    return Prefix.load(built.document())


def tool_specs(table: Sequence[Mapping[str, Any]]) -> list[ToolSpec]:
    """`ToolRegistry.tool_table()` rows as render `ToolSpec`s, in order."""
    return [ToolSpec(str(t["name"]), str(t["description"]), dict(t["input_schema"])) for t in table]


@dataclass(frozen=True)
class ConversationView:
    """`Workspace.request_at`: the fold, the dialect rendered, the request body (key order as
    sent), the validator's violations per dialect (`[]`: accepted), and whether the run's frozen
    prefix (system segments, tools) was found and rendered (else the body holds messages only)."""

    fold: fold_api.RunFold
    dialect: str
    body: dict[str, Any]
    verdicts: dict[str, list[Any]]
    with_prefix: bool


def stored_prefix(assembled: PromptAssembled | None, seq: int | None, cas: Cas) -> Prefix | None:
    """The frozen prefix the `prompt_assembled` line `assembled` (at `seq`) stored in `cas` (None
    when there is none or it stored none, e.g. a foreign ledger). Raises `E_PATH_NOT_FOUND` for
    a missing object, `E_LEDGER_CORRUPT` for one that is not a prefix document."""
    locator = assembled.prefix if assembled is not None else None
    loc = parse_locator(locator) if locator else None
    if not isinstance(loc, CasLocator):
        return None
    return Prefix.load(cas.get_locator(loc), f"{locator} (prompt_assembled at seq {seq})")


def conversation_view(fold: fold_api.RunFold, dialect: str | None, cas: Cas) -> ConversationView:
    """`fold`'s conversation rendered as the request body of `dialect` (None: the run's own
    dialect from its frozen prefix in `cas`, else `anthropic`) and validated for every dialect.
    Raises `E_INVALID_ARGS` for an unknown dialect, `E_PATH_NOT_FOUND` for a missing prefix
    object, `E_LEDGER_CORRUPT` for one that is not a prefix document."""
    prefix = stored_prefix(fold.prefix, fold.prefix_seq, cas)
    chosen = check_dialect(dialect or (prefix.dialect if prefix is not None else "anthropic"))
    messages, uncached = with_regions(fold.messages, fold.regions)  # the context regions block last

    def body_for(d: str) -> dict[str, Any]:
        if prefix is not None:
            return render(d, prefix.spec(messages, uncached_tail=uncached))
        return render(d, RequestSpec(model="-", messages=messages, uncached_tail=uncached))

    verdicts = {d: validate(d, body_for(d)) for d in DIALECTS}
    return ConversationView(fold, chosen, body_for(chosen), verdicts, prefix is not None)
