"""Helpers for the region tests: a simple model of the notes, todo and scratch regions (dicts and
lists, no sizes), and a writer of runs whose waves edit the regions as the run loop does (a
`context_changed` line between each context tool call's `tool_called` and `tool_result`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runfold.core.causes import Cause
from runfold.core.errors import RunfoldError
from runfold.core.records import Draft, Record
from runfold.core.regions import Edit, Regions, apply_edit
from runfold.core.tokens import estimate_tokens

RUN = "0198f6a2-7c4a-7bbb-9d1e-00000000a001"


@dataclass
class Model:
    """The regions as plain data: notes name → text (insertion order), todo [number, text, done],
    scratch text. `apply` returns False (and changes nothing) for an edit that cannot apply."""

    notes: dict[str, str] = field(default_factory=dict)
    todo: list[list[Any]] = field(default_factory=list)
    scratch: str = ""

    def apply(self, region: str, op: str, name: str | None, text: str | None, item: int | None) -> bool:
        if region == "notes":
            assert name is not None
            if not name.strip() or len(name) > 64:
                return False
            if op == "delete":
                return self.notes.pop(name, None) is not None
            assert text is not None
            new = text if op == "write" or name not in self.notes else self.notes[name] + text
            if not new.strip():
                return False
            self.notes[name] = new
            return True
        if region == "todo":
            if op == "add":
                assert text is not None
                if not text.strip():
                    return False
                self.todo.append([len(self.todo) + 1, text, False])
                return True
            for entry in self.todo:
                if entry[0] == item and not entry[2]:
                    entry[2] = True
                    return True
            return False
        assert text is not None
        self.scratch = text
        return True

    def same(self, regions: Regions) -> bool:
        return (
            {n.name: n.text for n in regions.notes} == self.notes
            and [n.name for n in regions.notes] == list(self.notes)
            and [[t.item, t.text, t.done] for t in regions.todo] == self.todo
            and regions.scratch == self.scratch
        )


def use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


TOOL_OF = {
    ("notes", "write"): "notes_write",
    ("notes", "append"): "notes_append",
    ("notes", "delete"): "notes_delete",
    ("todo", "add"): "todo_add",
    ("todo", "done"): "todo_done",
    ("scratch", "write"): "scratch_write",
}


class Writer:
    """Writes a run's lines into `append` (a `MemLedger.append`) as the live loop would, computing
    each region line's sizes with `apply_edit` on its own copy of the regions."""

    def __init__(self, append: Any, run: str = RUN) -> None:
        self.append = append
        self.run = run
        self.regions = Regions()
        self.revision = 0
        self.calls = 0

    def line(self, kind: str, data: dict[str, Any], who: str = "agent") -> Record:
        (rec,) = self.append([Draft(self.run, who, kind, data)])
        return rec

    def start(self) -> Record:
        return self.line("run_started", {"task": "t", "goal": "", "skills": [], "opening": "with_person"}, "person")

    def _request(self) -> None:
        self.line("prompt_shape_compared", {})
        self.line("model_called", {"model": "m1", "request": {"hash": "0" * 64, "bytes": 1}})

    def wave(self, edits: list[tuple[str, str, str | None, str | None, int | None]], freeze_after: int | None = None) -> list[bool]:
        """One turn whose reply calls a context tool per edit; returns which edits applied. With
        `freeze_after`, the run is frozen after that many calls (the wave never completes)."""
        self._request()
        ids = [f"c{self.calls + i}" for i in range(len(edits))]
        self.calls += len(edits)
        blocks = [use(cid, TOOL_OF[(r, op)], {}) for cid, (r, op, *_rest) in zip(ids, edits, strict=True)]
        self.line("model_returned", {"message": {"content": blocks}, "calls": len(blocks)})
        applied: list[bool] = []
        before = (self.regions, self.revision)
        for n, (cid, (region, op, name, text, item)) in enumerate(zip(ids, edits, strict=True)):
            if freeze_after is not None and n == freeze_after:
                self.line("run_frozen", {"completion": "cancelled"}, "runtime")
                self.regions = before[0]
                return applied
            self.line("tool_called", {"id": cid, "name": TOOL_OF[(region, op)], "args": "{}"})
            number = self.regions.next_item if (region, op) == ("todo", "add") else item
            edit = Edit(region, op, name, text, number)  # type: ignore[arg-type]
            try:
                done = apply_edit(self.regions, edit, 0)
            except RunfoldError as err:
                self.line("tool_result", {"tool_use_id": cid, "name": "x", "error": err.to_data()})
                applied.append(False)
                continue
            self.line(
                "context_changed",
                {
                    "region": region,
                    "cause": Cause.CONTEXT_TOOL.value,
                    "added": list(done.added),
                    "removed": list(done.removed),
                    "token_delta": estimate_tokens(done.bytes_added) - estimate_tokens(done.bytes_removed),
                    **edit.to_data(),
                    "tool_use_id": cid,
                    "bytes_added": done.bytes_added,
                    "bytes_removed": done.bytes_removed,
                    "tokens_added": estimate_tokens(done.bytes_added),
                    "tokens_removed": estimate_tokens(done.bytes_removed),
                    "revision_before": self.revision,
                    "revision_after": self.revision + 1,
                },
            )
            self.regions = done.regions
            self.revision += 1
            self.line("tool_result", {"tool_use_id": cid, "name": "x", "result": {"ok": True}})
            applied.append(True)
        return applied

    def answer(self) -> Record:
        self._request()
        return self.line("model_returned", {"message": {"content": [{"kind": "text", "text": "ok"}]}, "calls": 0})
