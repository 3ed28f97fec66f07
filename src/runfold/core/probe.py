"""The handoff probe (DESIGN.md §4 `eval_run`): a fixed set of questions asked of a run's last
state and of its successor's, to see what the successor kept of what was known at the handoff.

Pure: a probe file's bytes → `Probe`, and two lists of answers → the `eval_run` payload. Asking
is the runtime's work (each question is a one-turn fork of the state it probes, in the ledger).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from runfold.core.errors import invalid_args
from runfold.core.payloads import EvalRun

MAX_QUESTIONS = 100
"""Questions a probe may hold: each one costs two model calls."""


@dataclass(frozen=True)
class Question:
    """One probe question: `ask`, the words sent; `expect`, text a right answer contains
    (case-insensitive; None: the two answers are compared with each other)."""

    ask: str
    expect: str | None = None


@dataclass(frozen=True)
class Probe:
    """A named, versioned set of questions (`eval_run.probe`, `eval_run.version`)."""

    name: str
    version: int
    questions: tuple[Question, ...]


def parse_probe(raw: bytes, source: str) -> Probe:
    """A probe from a JSON document: `{"probe": NAME, "version"?: N ≥ 1 (default 1), "questions":
    [{"ask": TEXT, "expect"?: TEXT} | TEXT, ...]}`. Raises `E_INVALID_ARGS` naming `source` and
    the field for anything else (not JSON, no questions, a blank question, more than
    `MAX_QUESTIONS`)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_args("read the probe", source, f"write it as one JSON object ({exc})") from None
    if not isinstance(doc, dict):
        raise invalid_args("read the probe", source, 'write it as a JSON object: {"probe": NAME, "questions": [...]}')
    name = doc.get("probe")
    if not isinstance(name, str) or not name.strip():
        raise invalid_args("read the probe", f"{source}: probe", "name the probe: a non-empty string")
    version = doc.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise invalid_args("read the probe", f"{source}: version", "give the version as a whole number ≥ 1")
    items = doc.get("questions")
    if not isinstance(items, list) or not items or len(items) > MAX_QUESTIONS:
        raise invalid_args(
            "read the probe", f"{source}: questions", f"give 1 to {MAX_QUESTIONS} questions as a JSON array"
        )
    questions = []
    for i, item in enumerate(items):
        where = f"{source}: questions[{i}]"
        entry = {"ask": item} if isinstance(item, str) else item
        if not isinstance(entry, dict) or set(entry) - {"ask", "expect"}:
            raise invalid_args("read the probe", where, 'give a question as text or as {"ask": TEXT, "expect": TEXT}')
        ask, expect = entry.get("ask"), entry.get("expect")
        if not isinstance(ask, str) or not ask.strip():
            raise invalid_args("read the probe", f"{where}.ask", "give the question in words")
        if expect is not None and (not isinstance(expect, str) or not expect.strip()):
            raise invalid_args("read the probe", f"{where}.expect", "give the expected text in words, or leave it out")
        questions.append(Question(ask, expect))
    return Probe(name.strip(), version, tuple(questions))


def _plain(text: str) -> str:
    """An answer for comparison: case folded, runs of whitespace as one space, without the
    punctuation at its ends."""
    return re.sub(r"\s+", " ", text.casefold()).strip().strip(".!?,;:\"'` ")


def holds(question: Question, answer: str) -> bool:
    """Whether `answer` contains the question's `expect` (case-insensitive, whitespace folded)."""
    return question.expect is not None and _plain(question.expect) in _plain(answer)


def judge(probe: Probe, predecessor: str, before: Sequence[str], after: Sequence[str]) -> EvalRun:
    """The `eval_run` payload of `probe` asked of `predecessor`'s last state (`before`, one answer
    per question) and of its successor's (`after`).

    A question with `expect` was known before when the first answer contains it: kept when the
    second does too, lost when it does not (not counted when it was not known before). A
    question without `expect` is kept when both answers read the same (case, whitespace and end
    punctuation aside), else lost. `lost` holds the 0-based indices of the lost questions.
    Raises `E_INVALID_ARGS` when the answers do not number the questions."""
    n = len(probe.questions)
    if len(before) != n or len(after) != n:
        raise invalid_args(
            "judge the probe", f"{len(before)} and {len(after)} answers", f"give one answer per question ({n})"
        )
    kept = 0
    lost: list[int] = []
    for i, (q, b, a) in enumerate(zip(probe.questions, before, after, strict=True)):
        if q.expect is None:
            same = _plain(b) == _plain(a)
        elif not holds(q, b):
            continue
        else:
            same = holds(q, a)
        if same:
            kept += 1
        else:
            lost.append(i)
    return EvalRun(
        probe=probe.name,
        version=probe.version,
        predecessor=predecessor,
        kept=kept,
        lost=lost,
        before=list(before),
        after=list(after),
    )


__all__ = ["MAX_QUESTIONS", "Probe", "Question", "holds", "judge", "parse_probe"]
