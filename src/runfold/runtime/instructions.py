"""Instruction files: `AGENTS.md` (and `CLAUDE.md` when present) at the workspace root and at the
room root, read once when a run starts and frozen into its prefix as system segments.

Their bytes go to the content store and the run's `run_started.instructions` pins each by name
and BLAKE3 hash (as `skills` pins a skill), so `why` and replay show exactly which bytes a run
read, and a file edited later changes no replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runfold.core.canonical import content_hash
from runfold.core.errors import invalid_args
from runfold.core.payloads import SkillRef
from runfold.core.render import SystemSegment

FILE_NAMES: Final = ("AGENTS.md", "CLAUDE.md")
"""The instruction files looked for, in this order, at each root."""

SLOT_PREFIX: Final = "instructions:"
"""A segment slot of an instruction file is this prefix and the file's workspace-relative path."""


@dataclass(frozen=True)
class Instruction:
    """One instruction file as read: `name` (its path relative to the workspace, `/`-separated),
    its exact `raw` bytes and their BLAKE3 `hash`."""

    name: str
    raw: bytes

    @property
    def hash(self) -> str:
        return content_hash(self.raw)

    def pin(self) -> SkillRef:
        """`{name, hash}` for `run_started.instructions`."""
        return SkillRef(name=self.name, hash=self.hash)

    def segment(self) -> SystemSegment:
        """The system segment the file becomes: slot `instructions:<name>`, its text introduced
        by where it came from."""
        where = "the workspace root" if "/" not in self.name else f"the room `{self.name.rsplit('/', 1)[0]}`"
        text = f"Instructions from {self.name} ({where}); follow them:\n\n{self.raw.decode('utf-8')}"
        return SystemSegment(SLOT_PREFIX + self.name, text)


def read_instructions(workspace: Path, room: str | None) -> list[Instruction]:
    """The instruction files of a run working in `room` (None: the workspace root): each of
    `FILE_NAMES` at the workspace root, then at the room root, that exists as a regular file
    inside the workspace; an empty file is skipped. Raises `E_INVALID_ARGS` naming the file when
    it is not UTF-8 text or resolves outside the workspace (a symlink)."""
    roots = [("", workspace)]
    if room:
        roots.append((room + "/", workspace / room))
    real_ws = workspace.resolve()
    out: list[Instruction] = []
    for prefix, root in roots:
        for name in FILE_NAMES:
            path = root / name
            if not path.is_file():
                continue
            label = prefix + name
            if not path.resolve().is_relative_to(real_ws):
                raise invalid_args(
                    f"read the instruction file {label}",
                    str(path),
                    "it resolves outside the workspace; copy the instructions into the workspace instead of linking them",
                )
            raw = path.read_bytes()
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise invalid_args(
                    f"read the instruction file {label} (not UTF-8 at byte {exc.start})",
                    str(path),
                    "save it as UTF-8 text",
                ) from None
            if raw.strip():
                out.append(Instruction(label, raw))
    return out
