"""The model-edited regions of the context window, pure (DESIGN.md §10): pinned notes (named
entries), a todo checklist (numbered items with a done flag) and scratch (one free text). Their
state is a fold of the ledger's `context_changed` lines on those regions (cause `context_tool`),
so the live loop, replay, forks and resumes see the same regions at the same seq.

The regions reach the model as one runtime-voice text block appended to the last user message
of each request, after the tail cache breakpoint (`with_regions`): the frozen prefix and every
message already sent stay byte-identical, so an edit never rebuilds the prompt cache; only the
block itself, a few hundred tokens at the request's end, is read uncached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from runfold.core.canonical import Json
from runfold.core.errors import RunfoldError, invalid_args
from runfold.core.messages import Message, text_block
from runfold.core.speakers import Runtime, escape_attribute, escape_body
from runfold.core.tokens import estimate_tokens

EditedRegion = Literal["notes", "todo", "scratch"]
EDITED_REGIONS: Final[tuple[EditedRegion, ...]] = ("notes", "todo", "scratch")
"""The regions the model edits with the context tools (wire names, pinned)."""

OPS: Final[Mapping[str, tuple[str, ...]]] = {
    "notes": ("write", "append", "delete"),
    "todo": ("add", "done"),
    "scratch": ("write",),
}
"""The edits of each region (`context_changed.op`, wire names, pinned)."""

NOTE_NAME_CHARS: Final = 64
"""The longest note name (characters)."""

REGIONS_HEAD: Final = (
    "Context regions: your pinned notes, todo checklist and scratch, kept by the runtime across "
    "compactions and changed only by your context tools."
)


@dataclass(frozen=True)
class Note:
    """A pinned note: its `name`, `text`, and the seq of the line that last changed it."""

    name: str
    text: str
    seq: int


@dataclass(frozen=True)
class TodoItem:
    """A todo item: `item` (its number, from 1, never reused), `text`, `done`, and the seq of
    the line that last changed it."""

    item: int
    text: str
    done: bool
    seq: int


@dataclass(frozen=True)
class Regions:
    """The regions at one point of a run's lineage (immutable: a fold step returns a new one).

    `next_item` is the number the next todo item gets; `scratch_seq` the line that last wrote
    scratch (None: empty)."""

    notes: tuple[Note, ...] = ()
    todo: tuple[TodoItem, ...] = ()
    scratch: str = ""
    scratch_seq: int | None = None
    next_item: int = 1

    @property
    def empty(self) -> bool:
        return not self.notes and not self.todo and not self.scratch

    def note(self, name: str) -> Note | None:
        return next((n for n in self.notes if n.name == name), None)

    def item(self, number: int) -> TodoItem | None:
        return next((t for t in self.todo if t.item == number), None)


@dataclass(frozen=True)
class Edit:
    """One region edit as `context_changed` carries it: `region`, `op` and the op's fields —
    notes: `name` and `text` (write: replace or create; append: add to the end, creating the
    note when missing; delete: `name` only); todo: add `text` (the item number is assigned, and
    recorded as `item`), done `item`; scratch: write `text` (replaces it; empty clears it)."""

    region: EditedRegion
    op: str
    name: str | None = None
    text: str | None = None
    item: int | None = None

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Edit:
        """Read a region `context_changed` payload's edit. Raises `E_INVALID_ARGS` naming the
        field for an unknown region or op, or a field missing or of the wrong type."""
        region = data.get("region")
        if region not in EDITED_REGIONS:
            raise invalid_args("read a region edit", "data.region", "use notes, todo or scratch", EDITED_REGIONS)
        op = data.get("op")
        if op not in OPS[region]:
            raise invalid_args("read a region edit", "data.op", f"use an op of {region}", OPS[region])
        name, text, item = data.get("name"), data.get("text"), data.get("item")
        if region == "notes" and not isinstance(name, str):
            raise invalid_args("read a region edit", "data.name", "a note edit names its note")
        if (region == "notes" and op != "delete") or region == "scratch" or op == "add":
            if not isinstance(text, str):
                raise invalid_args("read a region edit", "data.text", "this edit carries its text")
        if region == "todo" and (isinstance(item, bool) or not isinstance(item, int)):
            raise invalid_args("read a region edit", "data.item", "a todo edit names its item number")
        return cls(
            region,
            str(op),
            name if isinstance(name, str) else None,
            text if isinstance(text, str) else None,
            item if isinstance(item, int) else None,
        )

    def to_data(self) -> dict[str, Json]:
        """The edit's own fields of the line (`op`, then the present ones of name/text/item)."""
        out: dict[str, Json] = {"op": self.op}
        if self.name is not None:
            out["name"] = self.name
        if self.text is not None:
            out["text"] = self.text
        if self.item is not None:
            out["item"] = self.item
        return out


@dataclass(frozen=True)
class Applied:
    """An edit applied: the `regions` after it, the `removed` and `added` entry lines in bytes
    (UTF-8 of `entry_lines`), and the entries' keys removed and added (`context_changed.removed`
    / `added`: a note's name, a todo item as `#<n>`, `scratch`)."""

    regions: Regions
    bytes_removed: int
    bytes_added: int
    removed: tuple[str, ...]
    added: tuple[str, ...]


def note_line(note: Note) -> str:
    """A note's line in the regions block: `<note name="…">text</note>` (escaped: one line)."""
    return f'<note name="{escape_attribute(note.name)}">{escape_body(note.text)}</note>'


def item_line(item: TodoItem) -> str:
    """A todo item's line: `<item n="3" done="yes|no">text</item>` (escaped: one line)."""
    return f'<item n="{item.item}" done="{"yes" if item.done else "no"}">{escape_body(item.text)}</item>'


def scratch_line(text: str) -> str:
    """Scratch's line: `<scratch>text</scratch>` (escaped: one line)."""
    return f"<scratch>{escape_body(text)}</scratch>"


def _size(line: str | None) -> int:
    """Bytes an entry line takes in the block: its UTF-8, its `runtime: ` label and newline."""
    return 0 if line is None else len(line.encode("utf-8")) + len("runtime: \n")


def region_bytes(regions: Regions, region: EditedRegion) -> int:
    """Bytes of a region's entries in the regions block (each entry line with its label and
    newline; the block's head and envelope lines are not counted): what its budget is held to."""
    if region == "notes":
        return sum(_size(note_line(n)) for n in regions.notes)
    if region == "todo":
        return sum(_size(item_line(t)) for t in regions.todo)
    return _size(scratch_line(regions.scratch)) if regions.scratch else 0


def region_tokens(regions: Regions, region: EditedRegion) -> int:
    """`region_bytes` as tokens by the bytes/4 estimate (`core.tokens.estimate_tokens`): one
    deterministic measure, the same live, at replay and in `why`."""
    return estimate_tokens(region_bytes(regions, region))


def _refuse(edit: Edit, subject: str, recovery: str, nearby: Sequence[str] = ()) -> RunfoldError:
    return invalid_args(f"{edit.op} in the {edit.region} region", subject, recovery, tuple(nearby)[:8])


def apply_edit(regions: Regions, edit: Edit, seq: int) -> Applied:
    """`edit` applied at `seq` (DESIGN.md §10); `regions` is not modified. A todo `add` whose
    `item` is None is numbered `regions.next_item` (the live loop records the number it got).

    Raises `E_INVALID_ARGS` for an edit that cannot apply: delete of a missing note, done of a
    missing item or one already done, an add whose number is not the next one, a note name
    empty or longer than `NOTE_NAME_CHARS`, an empty note or item text."""
    if edit.region == "notes":
        assert edit.name is not None
        name = edit.name
        if not name.strip() or len(name) > NOTE_NAME_CHARS:
            raise _refuse(edit, f"note {name!r}", f"name the note with 1 to {NOTE_NAME_CHARS} characters")
        old = regions.note(name)
        if edit.op == "delete":
            if old is None:
                raise _refuse(edit, f"note {name!r}", "delete a note that exists", [n.name for n in regions.notes])
            notes = tuple(n for n in regions.notes if n.name != name)
            return Applied(replace(regions, notes=notes), _size(note_line(old)), 0, (name,), ())
        assert edit.text is not None
        text = edit.text if edit.op == "write" or old is None else old.text + edit.text
        if not text.strip():
            raise _refuse(edit, f"note {name!r}", "give the note some text (delete it with notes_delete)")
        new = Note(name, text, seq)
        if old is None:
            notes = (*regions.notes, new)
        else:
            notes = tuple(new if n.name == name else n for n in regions.notes)
        removed = _size(note_line(old)) if old is not None else 0
        return Applied(
            replace(regions, notes=notes), removed, _size(note_line(new)), (name,) if old else (), (name,)
        )
    if edit.region == "todo":
        if edit.op == "add":
            number = regions.next_item if edit.item is None else edit.item
            assert edit.text is not None
            if number != regions.next_item:
                raise _refuse(edit, f"item {number}", f"number the new item {regions.next_item}")
            if not edit.text.strip():
                raise _refuse(edit, "the item text", "say what is to be done")
            item = TodoItem(number, edit.text, False, seq)
            todo = (*regions.todo, item)
            return Applied(replace(regions, todo=todo, next_item=number + 1), 0, _size(item_line(item)), (), (f"#{number}",))
        assert edit.item is not None
        found = regions.item(edit.item)
        if found is None or found.done:
            open_items = [str(t.item) for t in regions.todo if not t.done]
            why = "it is already done" if found is not None else "there is no such item"
            raise _refuse(edit, f"item {edit.item}", f"mark an open item done ({why})", open_items)
        done = replace(found, done=True, seq=seq)
        todo = tuple(done if t.item == edit.item else t for t in regions.todo)
        key = f"#{edit.item}"
        return Applied(replace(regions, todo=todo), _size(item_line(found)), _size(item_line(done)), (key,), (key,))
    assert edit.text is not None
    removed = _size(scratch_line(regions.scratch)) if regions.scratch else 0
    added = _size(scratch_line(edit.text)) if edit.text else 0
    return Applied(
        replace(regions, scratch=edit.text, scratch_seq=seq if edit.text else None),
        removed,
        added,
        ("scratch",) if regions.scratch else (),
        ("scratch",) if edit.text else (),
    )


def regions_text(regions: Regions) -> str | None:
    """The regions block the model reads, or None when every region is empty (then requests
    are exactly what they were without regions). Every line is in the runtime's voice
    (`runtime: `, `speakers.Runtime`): the block can never pass for the person's words, and an
    entry's text is escaped to one line, so it can neither close its envelope nor open a line."""
    if regions.empty:
        return None
    lines = [REGIONS_HEAD]
    if regions.notes:
        lines += ["<notes>", *(note_line(n) for n in regions.notes), "</notes>"]
    if regions.todo:
        lines += ["<todo>", *(item_line(t) for t in regions.todo), "</todo>"]
    if regions.scratch:
        lines.append(scratch_line(regions.scratch))
    return Runtime().render("\n".join(lines))


def with_regions(messages: Sequence[Message], regions: Regions) -> tuple[Sequence[Message], int]:
    """The messages of a request with the regions block, and how many trailing blocks of the
    last message follow the tail cache breakpoint (`RequestSpec.uncached_tail`).

    The block is appended to the last message when it is a user message (a fresh copy of that
    one message; the conversation is not touched), else sent as a user message of its own. It
    sits after everything already sent and after the tail breakpoint, so request n+1 still
    extends request n up to that breakpoint and the prompt cache survives every region edit
    (DESIGN.md §6, §8). Empty regions: `messages` unchanged and 0."""
    text = regions_text(regions)
    if text is None:
        return messages, 0
    block = text_block(text)
    if messages and messages[-1]["role"] == "user":
        last = messages[-1]
        return [*messages[:-1], {"role": "user", "content": [*last["content"], block]}], 1
    return [*messages, {"role": "user", "content": [block]}], 1


REGIONS_ENVELOPE: Final = "head and envelope"
"""The name `region_entries` gives the block's lines that are no entry (its head, the tags)."""


def region_entries(regions: Regions) -> list[tuple[EditedRegion, str, int | None, int]]:
    """The regions block part by part, as `(region, name, seq, bytes)` in block order: each note
    (its name), todo item (`#<n>`) and scratch, sized by `region_bytes`'s rule with the seq of
    the line that last wrote it; then `REGIONS_ENVELOPE`, the rest of the block's text, under
    the first region shown and the seq of the latest edit (it is there because of the edits).
    The bytes add up to the UTF-8 size of `regions_text`; empty regions give no entry."""
    text = regions_text(regions)
    if text is None:
        return []
    out: list[tuple[EditedRegion, str, int | None, int]] = [
        ("notes", n.name, n.seq, _size(note_line(n))) for n in regions.notes
    ]
    out += [("todo", f"#{t.item}", t.seq, _size(item_line(t))) for t in regions.todo]
    if regions.scratch:
        out.append(("scratch", "scratch", regions.scratch_seq, _size(scratch_line(regions.scratch))))
    latest = max((seq for _, _, seq, _ in out if seq is not None), default=None)
    rest = len(text.encode("utf-8")) - sum(size for *_, size in out)
    out.append((out[0][0], REGIONS_ENVELOPE, latest, rest))
    return out



def with_regions_owned(
    messages: Sequence[Message], sources: Sequence[Sequence[tuple[int | None, str | None]]], regions: Regions
) -> tuple[Sequence[Message], list[tuple[tuple[int | None, str | None], ...]], int]:
    """`with_regions` with the blocks' owners kept in step: `(messages, sources, uncached)`
    where `sources[i][j]` owns block j of message i (`core.render.attribution`) and the regions
    block is owned by the latest edit's line, cause `context_tool` (the block is one text
    block; `region_entries` splits it entry by entry for `why`)."""
    owned = [tuple(row) for row in sources]
    out, uncached = with_regions(messages, regions)
    if uncached:
        entries = region_entries(regions)
        owner: tuple[int | None, str | None] = (entries[-1][2] if entries else None, "context_tool")
        if len(out) == len(messages):
            owned[-1] = (*owned[-1], owner)
        else:
            owned.append((owner,))
    return out, owned, uncached
