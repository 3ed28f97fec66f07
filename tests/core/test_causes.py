"""The causes of DESIGN.md §10: the wire names pinned, one source, and for each cause the places
in runfold that write it (or why none does yet), checked against the source so that a new path
that writes a cause, or a place that disappears, forces a decision here."""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import re
from pathlib import Path

from runfold.core import conversation
from runfold.core.causes import CAUSES, Cause

WIRE = (
    "seed",
    "message",
    "model_reply",
    "tool_result",
    "produced_part",
    "compaction",
    "transform",
    "context_tool",
    "hook",
    "fan_out",
    "interaction",
    "resume",
    "framework",
)
"""DESIGN.md §10, typed out by hand: never derived from a member name."""

WRITTEN_AT: dict[str, tuple[str, ...]] = {
    "seed": (
        "runfold.core.fold.run:_Folder._open",
        "runfold.core.fold.why:_prefix_history",
        "runfold.core.fold.why:prefix_owners",
    ),
    "message": ("runfold.core.compaction:steer_cause",),
    "fan_out": ("runfold.core.compaction:steer_cause",),
    "model_reply": (
        "runfold.core.fold.run:_Folder._reply",
        "runfold.core.fold.run:_Folder._tool_called",
        "runfold.core.fold.run:_Folder._commit",
    ),
    "tool_result": ("runfold.core.fold.run:_Folder._tool_result", "runfold.core.fold.why:_region_changes"),
    "resume": ("runfold.core.fold.run:_Folder._tool_result",),
    "compaction": (
        "runfold.core.compaction:apply_change",
        "runfold.core.fold.run:_Folder._compact",
        "runfold.importers.drafts:_Run.compaction",
        "runfold.runtime.compaction:WindowManager._record",
        "runfold.runtime.replay:rebuilt_requests",
    ),
    "context_tool": (
        "runfold.core.fold.region_step:region_step",
        "runfold.core.fold.why:why_report",
        "runfold.runtime.regions:RegionEditor.edit",
    ),
    "framework": (
        "runfold.core.compaction:is_reminder",
        "runfold.core.compaction:steer_cause",
        "runfold.runtime.compaction:WindowManager._remind",
    ),
}
"""Where runfold attributes a block or a change to each cause (module:qualname)."""

NOT_YET: dict[str, str] = {
    "produced_part": "no runtime path produces window parts of its own yet",
    "transform": "no configured rewrite of the window exists yet",
    "hook": "there are no user hooks yet",
    "interaction": "approvals are not built yet",
}
"""Causes no path writes yet, and why; a writer appearing in the source fails the test below."""

SRC = Path(importlib.import_module("runfold").__file__ or "").parent


def _writer_pattern(name: str) -> re.Pattern[str]:
    """A line that attributes something to `name`: `Cause.NAME`, `cause = "name"`, a
    `"cause": "name"` key, or a `BlockSource(..., "name")`."""
    q = rf"[\"']{re.escape(name)}[\"']"
    return re.compile(
        rf"Cause\.{name.upper()}\b|\bcause\s*=\s*{q}|[\"']cause[\"']\s*:\s*{q}|BlockSource\([^)]*{q}\s*\)"
    )


def _functions(tree: ast.Module) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.append((child.lineno, child.end_lineno or child.lineno, name))
                walk(child, name + ".")

    walk(tree, "")
    return out


def _writers(name: str) -> set[str]:
    """Every `module:function` of src/runfold whose lines match `_writer_pattern(name)`. Lines at
    module level are passed over: they define names (a constant spelled like a cause, such as a
    summary call's `purpose`), while writing a line or a block happens inside a function."""
    pattern = _writer_pattern(name)
    found: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "causes.py":
            continue
        text = path.read_text(encoding="utf-8")
        if not pattern.search(text):
            continue
        module = "runfold." + ".".join(path.relative_to(SRC).with_suffix("").parts)
        funcs = _functions(ast.parse(text))
        for lineno, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                inner = [f for f in funcs if f[0] <= lineno <= f[1]]
                if inner:
                    found.add(f"{module}:{max(inner, key=lambda f: f[0])[2]}")
    return found


def test_the_wire_names_are_pinned_in_order_and_unique() -> None:
    assert CAUSES == WIRE
    assert len(set(CAUSES)) == 13
    assert [c.value for c in Cause] == list(WIRE)
    for cause in Cause:
        assert isinstance(cause, str) and cause == cause.value


def test_every_cause_has_a_docstring_naming_its_path() -> None:
    import runfold.core.causes as module

    body = next(
        n
        for n in ast.parse(inspect.getsource(module)).body
        if isinstance(n, ast.ClassDef) and n.name == "Cause"
    ).body
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.Assign)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
        ):
            docs[node.targets[0].id] = str(after.value.value)  # type: ignore[attr-defined]
    assert sorted(docs) == sorted(c.name for c in Cause)
    assert all(len(d) > 40 for d in docs.values())


def test_the_conversation_reads_the_one_list() -> None:
    assert conversation.CAUSES is CAUSES


def test_every_cause_has_a_writer_or_a_reason() -> None:
    assert set(WRITTEN_AT) | set(NOT_YET) == set(WIRE)
    assert not set(WRITTEN_AT) & set(NOT_YET)


def test_each_listed_place_exists_and_writes_its_cause() -> None:
    for name, places in WRITTEN_AT.items():
        for place in places:
            module_name, qualname = place.split(":")
            obj: object = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            source = inspect.getsource(obj)  # type: ignore[arg-type]
            literal = re.search(rf"Cause\.{name.upper()}\b|[\"']{name}[\"']", source)
            assert literal, f"{place} no longer writes the cause {name!r}; update WRITTEN_AT"


def test_no_unlisted_place_writes_a_cause() -> None:
    for name in WIRE:
        found = _writers(name)
        listed = set(WRITTEN_AT.get(name, ()))
        extra = found - listed
        assert not extra, f"{sorted(extra)} write the cause {name!r}: list them in WRITTEN_AT" + (
            " (and drop it from NOT_YET)" if name in NOT_YET else ""
        )
