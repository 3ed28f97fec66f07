"""Tools from typed Python functions, and the ordered registry whose table the model sees (DESIGN.md §9).

A `Tool` is a name, a description, the JSON schema of its input (derived from type hints and
the docstring through pydantic), an effect (`read` or `write`) and a sync or async callable.
`ToolRegistry.tool_table()` is the part of the frozen prefix hashed into `prompt_assembled`, so
it is deterministic and byte-stable across processes.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.json_schema import GenerateJsonSchema

from runfold.core.canonical import Json, content_hash, encode_json
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.tools.context import ToolContext
from runfold.tools.docstrings import parse_docstring
from runfold.tools.results import result_object

Effect = Literal["read", "write"]
"""`read`: the tool changes nothing (calls of one wave may run concurrently); `write`: it may act."""
EFFECTS: tuple[Effect, ...] = ("read", "write")

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
"""Tool names the provider APIs accept (Anthropic and OpenAI): 1-64 of `A-Za-z0-9_-`, up to the very
end of the string (`$` would let a trailing newline through)."""

SUBJECT_PARAMS: tuple[str, ...] = ("path", "command", "file", "url", "query", "pattern", "name")
"""Parameter names tried, in order, for the `subject` of a `tool_called` line."""


class _SchemaWithoutTitles(GenerateJsonSchema):
    """Pydantic's schema generator without the per-field `title` keys (noise for a model)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


@dataclass(frozen=True)
class _Param:
    name: str
    field: str
    positional_only: bool


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, eq=False)
class Tool:
    """One tool. Build it with `Tool.from_function` (or the `tool` decorator).

    - `name`: the wire name the model calls (`^[A-Za-z0-9_-]{1,64}$`);
    - `description`: what the model reads about the tool;
    - `input_schema`: the JSON schema (an `object`) of the arguments; it may hold floats (e.g. a
      float default): the table is stored as JSON text in the CAS, never as ledger `data`;
    - `effect`: `read` or `write` (see `Effect`);
    - `fn`: the callable; `args_model`: the pydantic model validating arguments;
    - `context_param`: the parameter that receives the `ToolContext`, if any;
    - `subject_param`: the argument used as the `tool_called.subject`, if any;
    - `times_itself`: True when the tool enforces its own timeout (e.g. `exec`), so the executor
      puts no ceiling of its own on the call.

    Calling the Tool object calls `fn` directly, so a decorated function stays usable.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    effect: Effect
    fn: Callable[..., Any]
    args_model: type[BaseModel]
    params: tuple[_Param, ...]
    context_param: str | None = None
    subject_param: str | None = None
    times_itself: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def spec(self) -> dict[str, Any]:
        """The tool's row of the tool table: `{name, description, input_schema}`."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    # ---- arguments ----------------------------------------------------------------------

    def parse_args(self, args_json: str) -> dict[str, Any]:
        """Parse the model's argument text and validate it (see `validate`).

        Raises `E_INVALID_ARGS` when the text is not JSON (naming the position), is not an
        object, or does not match the schema (naming the field).
        """
        text = args_json.strip() or "{}"
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                f"call tool `{self.name}`",
                "its arguments",
                f"the arguments are not valid JSON ({exc}); send one JSON object",
                nearby=tuple(p.name for p in self.params),
            ) from None
        return self.validate(value)

    def validate(self, args: Any) -> dict[str, Any]:
        """Validated arguments as `{parameter name: Python value}` (defaults filled in).

        Raises `E_INVALID_ARGS` naming the first offending field (`subject` is
        ``argument `<field path>` ``): a missing required field, an unknown field (with the
        closest parameter names as `nearby`), or a value of the wrong type or range.
        """
        if not isinstance(args, dict):
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                f"call tool `{self.name}`",
                "its arguments",
                f"the arguments must be a JSON object, got {_short(args)}; send an object with the "
                "fields of the tool's input_schema",
                nearby=tuple(p.name for p in self.params),
            )
        try:
            model = self.args_model.model_validate(args)
        except ValidationError as exc:
            raise self._invalid(exc) from None
        return {p.name: getattr(model, p.field) for p in self.params}

    def _invalid(self, exc: ValidationError) -> RunfoldError:
        errors = exc.errors(include_url=False)
        first = errors[0]
        loc = ".".join(str(part) for part in first["loc"]) or "arguments"
        names = [p.name for p in self.params]
        nearby: tuple[str, ...] = tuple(names)
        if first["type"] == "missing":
            what = f"`{loc}` is required"
        elif first["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(first["loc"][0]), names, n=3, cutoff=0.4)
            nearby = tuple(close) or tuple(names)
            what = f"`{loc}` is not a parameter of `{self.name}` (parameters: {', '.join(names) or 'none'})"
        else:
            what = f"`{loc}`: {first['msg']} (got {_short(first.get('input'))})"
        more = f" and {len(errors) - 1} more problem(s)" if len(errors) > 1 else ""
        return RunfoldError(
            ErrorCode.INVALID_ARGS,
            f"call tool `{self.name}`",
            f"argument `{loc}`",
            f"{what}{more}; send arguments that match the tool's input_schema",
            nearby=nearby,
        )

    def subject_of(self, args: Mapping[str, Any]) -> str | None:
        """The `tool_called.subject` for these arguments: the `subject_param` value as text."""
        if self.subject_param is None:
            return None
        value = args.get(self.subject_param)
        return None if value is None else str(value)

    # ---- calling ------------------------------------------------------------------------

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Json]:
        """Call the tool with validated `args` (from `validate`) and return its result object.

        Async functions are awaited; sync functions run in a worker thread. The return value
        becomes a float-free object through `result_object`. Exceptions of the tool propagate.
        """
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for p in self.params:
            if p.positional_only:
                positional.append(args[p.name])
            else:
                keywords[p.name] = args[p.name]
        if self.context_param is not None:
            keywords[self.context_param] = ctx
        if self.is_async:
            value = await self.fn(*positional, **keywords)
        else:
            value = await asyncio.to_thread(self.fn, *positional, **keywords)
            if inspect.isawaitable(value):
                value = await value
        return result_object(value)

    # ---- building -----------------------------------------------------------------------

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        effect: Effect = "read",
        subject: str | None = None,
        times_itself: bool = False,
    ) -> Tool:
        """Build a tool from a typed Python function (sync or async).

        The schema comes from the parameters' type hints through pydantic (int, str, bool,
        float, list[...], dict[...], Optional, Literal (→ `enum`), Annotated[..., Field(...)],
        pydantic models, TypedDicts, ...); a parameter with a default is optional. Descriptions
        come from the docstring: the text before its first section describes the tool, the
        `Args:` (Google) or `Parameters` (NumPy) entries describe the parameters. A parameter
        annotated `ToolContext` receives the call's context and is not part of the schema.
        `subject` names the argument shown as the call's subject (default: the first of
        SUBJECT_PARAMS present).

        Raises `E_INVALID_ARGS` (subject: the function) for a bad tool name or effect, a
        parameter without a type hint, `*args`/`**kwargs`, no docstring and no `description`,
        or a type pydantic cannot turn into a schema.
        """
        qual = getattr(fn, "__qualname__", repr(fn))
        tool_name: str = name or str(getattr(fn, "__name__", ""))
        where = f"function {qual}"
        if not TOOL_NAME.match(tool_name):
            raise invalid_args(
                f"register tool {tool_name!r}",
                where,
                "name the tool with 1-64 letters, digits, `_` or `-` (pass name=...)",
            )
        if effect not in EFFECTS:
            raise invalid_args(f"register tool `{tool_name}`", where, "set effect to `read` or `write`")
        doc = parse_docstring(inspect.getdoc(fn))
        text = description if description is not None else doc.description
        if not text.strip():
            raise invalid_args(
                f"register tool `{tool_name}`",
                where,
                "give the function a docstring (the model reads it as the tool's description) "
                "or pass description=...",
            )
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as exc:
            raise invalid_args(
                f"register tool `{tool_name}`",
                where,
                f"make its type hints resolvable at registration ({exc})",
            ) from None
        fields: dict[str, Any] = {}
        params: list[_Param] = []
        context_param: str | None = None
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise invalid_args(
                    f"register tool `{tool_name}`",
                    f"{where}, parameter {p.name}",
                    "replace *args/**kwargs with named, typed parameters",
                )
            if p.name not in hints:
                raise invalid_args(
                    f"register tool `{tool_name}`",
                    f"{where}, parameter {p.name}",
                    f"add a type hint to `{p.name}` (the model's schema is built from it)",
                )
            hint = hints[p.name]
            if hint is ToolContext:
                context_param = p.name
                continue
            field_name = f"p{len(params)}"
            info = Field(
                default=... if p.default is p.empty else p.default,
                alias=p.name,
                description=doc.params.get(p.name) or None,
            )
            fields[field_name] = (hint, info)
            params.append(_Param(p.name, field_name, p.kind is p.POSITIONAL_ONLY))
        try:
            model = create_model(
                f"{tool_name}_arguments",
                __config__=ConfigDict(extra="forbid", populate_by_name=False),
                **fields,
            )
            schema = model.model_json_schema(by_alias=True, schema_generator=_SchemaWithoutTitles)
        except Exception as exc:
            raise invalid_args(
                f"register tool `{tool_name}`",
                where,
                f"use parameter types pydantic can describe as JSON schema ({type(exc).__name__}: {exc})",
            ) from None
        schema.pop("title", None)
        schema.setdefault("properties", {})
        names = [p.name for p in params]
        if subject is not None and subject not in names:
            raise invalid_args(
                f"register tool `{tool_name}`", where, f"set subject to one of its parameters: {names}"
            )
        subject_param = subject or next((n for n in SUBJECT_PARAMS if n in names), None)
        return cls(
            name=tool_name,
            description=text.strip(),
            input_schema=schema,
            effect=effect,
            fn=fn,
            args_model=model,
            params=tuple(params),
            context_param=context_param,
            subject_param=subject_param,
            times_itself=times_itself,
        )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "read",
    subject: str | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "read",
    subject: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: `@tool` or `@tool(name=..., effect="write")` turns a typed function into a `Tool`
    (see `Tool.from_function`; same errors). The result is still callable like the function."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description, effect=effect, subject=subject)

    return wrap if fn is None else wrap(fn)


class ToolRegistry:
    """An ordered set of tools with unique names; the order is the order of `add`.

    `tool_table()` (and its bytes and hash) is what the frozen prefix records (DESIGN.md §5, §8).
    """

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item)

    def add(
        self, item: Tool | Callable[..., Any], *, name: str | None = None, effect: Effect | None = None
    ) -> Tool:
        """Register a Tool, or a typed function (built with `Tool.from_function`). Returns the Tool.

        Raises `E_INVALID_ARGS` when the name is already registered (or the function cannot be
        a tool, see `Tool.from_function`).
        """
        if isinstance(item, Tool):
            t = item
            if name is not None or effect is not None:
                t = Tool.from_function(
                    item.fn,
                    name=name or item.name,
                    description=item.description,
                    effect=effect or item.effect,
                    subject=item.subject_param,
                    times_itself=item.times_itself,
                )
        else:
            t = Tool.from_function(item, name=name, effect=effect or "read")
        if t.name in self._tools:
            raise invalid_args(
                f"register tool `{t.name}`",
                "the tool registry",
                f"a tool named `{t.name}` is already registered; pass name=... to register it under another name",
            )
        self._tools[t.name] = t
        return t

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def require(self, name: str) -> Tool:
        """The tool called `name`; raises `E_TOOL_UNKNOWN` with the closest names as `nearby`."""
        found = self._tools.get(name)
        if found is not None:
            return found
        names = list(self._tools)
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        nearby = tuple(close) or tuple(names[:10])
        listed = ", ".join(f"`{n}`" for n in nearby) or "none are registered"
        raise RunfoldError(
            ErrorCode.TOOL_UNKNOWN,
            "call tool",
            f"`{name}`",
            f"call one of the available tools ({listed})",
            nearby=nearby,
        )

    def names(self) -> list[str]:
        return list(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry of the named tools in the order given; unknown names raise `E_TOOL_UNKNOWN`."""
        return ToolRegistry([self.require(n) for n in names])

    def tool_table(self) -> list[dict[str, Any]]:
        """`[{name, description, input_schema}, ...]` in registration order."""
        return [t.spec() for t in self]

    def tool_table_bytes(self) -> bytes:
        """The table as compact JSON with object keys sorted (the canonical encoder): identical
        bytes for identical tools in any process."""
        return encode_json(self.tool_table())

    def tool_table_hash(self) -> str:
        """BLAKE3-256 (64 lowercase hex) of `tool_table_bytes()`."""
        return content_hash(self.tool_table_bytes())
