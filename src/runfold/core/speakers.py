"""Who said a steer, and the one rendering of it the model reads (DESIGN.md §6).

Only the person renders as `user: <text>`; the runtime as `runtime: <text>` (every line labelled);
another agent's words as one `<letter …>` whose body is escaped so that it can neither close its
envelope nor break a line: the whole letter is a single line, so no line of it can pass for the
person. The inverse parse of a recorded `steer_received.source` refuses anything it did not write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from runfold.core.address import address_problem
from runfold.core.errors import RunfoldError, invalid_args
from runfold.core.ids import is_run_id
from runfold.core.payloads import OPENINGS

PERSON_SOURCE = "user"
"""`steer_received.source` of the person's steer; also the label of their lines."""
RUNTIME_SOURCE = "runtime"
"""`steer_received.source` of the runtime's own word."""
FOREIGN_RUNTIME_SOURCE = "city"
"""The foreign (sprawling) spelling of the runtime's source; read, never written (DESIGN.md §12)."""
LETTER_KINDS = ("steer", "reply")
"""Why a letter reached the window: a steer signal at a safe point, or the reply a wait ended with."""

LetterKind = Literal["steer", "reply"]

LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""Every character (or CRLF pair) that `str.splitlines` treats as a line boundary."""

_LINE_BREAK_CHARS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BODY_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"} | {c: f"&#{ord(c)};" for c in _LINE_BREAK_CHARS}
_BODY_TABLE = str.maketrans(_BODY_ESCAPES)
_ATTR_TABLE = str.maketrans(_BODY_ESCAPES | {'"': "&quot;"})


def escape_body(text: str) -> str:
    """Escape `text` for the inside of an envelope (`<letter>`, `<task>`, `<goal>`).

    `&`, `<`, `>` become `&amp;`, `&lt;`, `&gt;` (the body cannot open or close a tag, and an
    already-escaped `&lt;` stays distinguishable); every line-break character becomes its numeric
    reference (`\\n` → `&#10;`), so the escaped body is one line and cannot start a new one.
    """
    return text.translate(_BODY_TABLE)


def escape_attribute(value: str) -> str:
    """`escape_body` plus `"` → `&quot;`: safe between the double quotes of an attribute."""
    return value.translate(_ATTR_TABLE)


@dataclass(frozen=True, slots=True)
class Person:
    """The person, through the control surface (`steer_received.source` = `user`)."""

    def recorded(self) -> str:
        return PERSON_SOURCE

    def render(self, text: str) -> str:
        """`user: <text>`: the person's words, verbatim after the label."""
        return f"{PERSON_SOURCE}: {text}"


@dataclass(frozen=True, slots=True)
class Runtime:
    """The runtime's own word to the run (a policy change, a wait that ran out, a reminder).

    `foreign` is True when the line spelled it `city`; the spelling is kept so `recorded()`
    reproduces the source it was read from.
    """

    foreign: bool = False

    def recorded(self) -> str:
        return FOREIGN_RUNTIME_SOURCE if self.foreign else RUNTIME_SOURCE

    def render(self, text: str) -> str:
        """`runtime: <text>` with every line of the text labelled `runtime: `, so no line of the
        runtime's words can pass for the person."""
        label = f"{RUNTIME_SOURCE}: "
        return label + LINE_BREAK.sub(lambda m: m.group(0) + label, text)


@dataclass(frozen=True, slots=True)
class Letter:
    """Another agent's words: `from_` is its address (without `@`); `run` the run that sent it;
    `kind` `steer`|`reply` (None: the source did not spell it, rendered as `steer`); `sender`
    the state the sender was in when it was delivered.

    Construction raises `E_INVALID_ARGS` when a field could not be recorded and read back: an
    address that breaks DESIGN.md §9 or holds a space, a run that is not a lowercase UUID, an
    unknown kind, or a sender state that is empty or holds whitespace.
    """

    from_: str
    run: str | None = None
    kind: LetterKind | None = None
    sender: str | None = None

    def __post_init__(self) -> None:
        problem = address_problem(self.from_)
        if problem is None and " " in self.from_:
            problem = "it contains a space"
        if problem is not None:
            raise invalid_args(
                f"use letter sender address ({problem})",
                repr(self.from_),
                "give the sending room's address, a relative path such as `lab/room1`",
            )
        if self.run is not None and not is_run_id(self.run):
            raise invalid_args(
                "use letter run", repr(self.run), "give the sending run's id as a lowercase hyphenated UUID"
            )
        if self.kind is not None and self.kind not in LETTER_KINDS:
            raise invalid_args("use letter kind", repr(self.kind), "give `steer` or `reply`")
        if self.sender is not None and (
            not self.sender or any(c.isspace() or not c.isprintable() for c in self.sender)
        ):
            raise invalid_args(
                "use letter sender state",
                repr(self.sender),
                "give the sender's state as one word without spaces, such as `running`",
            )

    def recorded(self) -> str:
        """`@<address>` then ` run=<id>`, ` kind=<kind>`, ` sender=<state>` for the fields set."""
        parts = [f"@{self.from_}"]
        if self.run is not None:
            parts.append(f"run={self.run}")
        if self.kind is not None:
            parts.append(f"kind={self.kind}")
        if self.sender is not None:
            parts.append(f"sender={self.sender}")
        return " ".join(parts)

    def render(self, text: str) -> str:
        """One line: `<letter from="@addr" [run=".."] kind=".." [sender=".."]>body</letter>`,
        attribute values and body escaped (see `escape_body`, `escape_attribute`)."""
        attrs = [f'from="@{escape_attribute(self.from_)}"']
        if self.run is not None:
            attrs.append(f'run="{escape_attribute(self.run)}"')
        attrs.append(f'kind="{self.kind or "steer"}"')
        if self.sender is not None:
            attrs.append(f'sender="{escape_attribute(self.sender)}"')
        return f"<letter {' '.join(attrs)}>{escape_body(text)}</letter>"


Speaker = Person | Runtime | Letter
"""Who said a steer's text. The type, never a prefix inside the text, says whether the person spoke."""

_LETTER_KEYS = ("run", "kind", "sender")


def _unreadable(source: str, why: str) -> RunfoldError:
    return invalid_args(
        f"read steer source ({why})",
        repr(source),
        "a steer_received source is `user`, `runtime` (or `city`), or `@<address>` optionally "
        "followed by ` run=<id> kind=steer|reply sender=<state>`",
    )


def parse_source(source: str) -> Speaker:
    """Read a recorded `steer_received.source` (DESIGN.md §4) back into its speaker.

    `user` → `Person`; `runtime` or the foreign `city` → `Runtime`; `@<address>` optionally
    followed by ` run=<id>`, ` kind=steer|reply`, ` sender=<state>` (each at most once, in that
    order, single spaces) → `Letter`. Anything else raises `E_INVALID_ARGS`: a source this
    build did not write is refused, never guessed. `parse_source(s).recorded() == s` for every
    accepted `s`.
    """
    if source == PERSON_SOURCE:
        return Person()
    if source == RUNTIME_SOURCE:
        return Runtime()
    if source == FOREIGN_RUNTIME_SOURCE:
        return Runtime(foreign=True)
    if not source.startswith("@"):
        raise _unreadable(source, "unknown speaker")
    head, *rest = source.split(" ")
    fields: dict[str, str] = {}
    position = 0
    for part in rest:
        key, eq, value = part.partition("=")
        if not eq or key not in _LETTER_KEYS:
            raise _unreadable(source, f"unexpected {part!r}")
        index = _LETTER_KEYS.index(key)
        if index < position:
            raise _unreadable(source, f"{key!r} repeated or out of order")
        position = index + 1
        fields[key] = value
    kind: LetterKind | None = None
    if "kind" in fields:
        if fields["kind"] == "steer":
            kind = "steer"
        elif fields["kind"] == "reply":
            kind = "reply"
        else:
            raise _unreadable(source, f"kind {fields['kind']!r}")
    try:
        return Letter(from_=head[1:], run=fields.get("run"), kind=kind, sender=fields.get("sender"))
    except RunfoldError as exc:
        raise _unreadable(source, exc.action) from exc


def render_steer(source: str, text: str) -> str:
    """The text a steer puts into the conversation, from its recorded `source` and `text`.

    Raises `E_INVALID_ARGS` (from `parse_source`) for a source this build did not write.
    """
    return parse_source(source).render(text)


# ---- openings -------------------------------------------------------------------------


def render_opening(opening: str, *, task: str, goal: str = "", handed_down_by: str = "") -> str:
    """The text of the first user message of a run (DESIGN.md §6).

    - `from_job`: one line pointing at the job file in the frozen prefix and naming who handed
      the task down (the task itself is in the prefix, so it is not repeated);
    - `inherited` (forks): who handed it down, then `<task>…</task>` and `<goal>…</goal>` with
      the bodies escaped by `escape_body` (`<`, `>`, `&`, and line breaks); an empty goal is
      omitted, `<goal>` line and all;
    - `with_person`: the person's words (`task`), verbatim.

    `handed_down_by` is escaped by `escape_body` (it is one line, whatever it holds). Raises
    `E_INVALID_ARGS` for an unknown opening, or for `with_person` with an empty or
    whitespace-only task (providers refuse empty text).
    """
    who = escape_body(handed_down_by or "runtime")
    if opening == "from_job":
        return f"The task is in the job file above, handed down by {who}."
    if opening == "inherited":
        text = f"Handed down by {who}:\n<task>{escape_body(task)}</task>"
        return f"{text}\n<goal>{escape_body(goal)}</goal>" if goal else text
    if opening == "with_person":
        if not task.strip():
            raise invalid_args(
                "open run with the person's words",
                "run_started.task",
                "give the person's words as a non-empty task",
            )
        return task
    raise invalid_args(
        f"render opening {opening!r}", "run_started.opening", "use one of: " + ", ".join(OPENINGS)
    )
