"""`runfold log` checks every line it prints: a line whose bytes were edited in place (it still
parses, is canonical and links to the line before it; only the line after no longer links to it)
is refused by `log --limit N` that stops at it, as `verify` and `show` refuse it, with the §11
error naming its line and seq."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_support import run_cli

from runfold.api import Workspace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def edited(tmp_path: Path) -> Path:
    """A workspace whose seq 5 was edited in place; its index (a projection) still holds the
    original hashes, as it does right after an edit."""
    root = tmp_path / "ws"
    Workspace.init(root).close()
    shutil.copytree(EXAMPLES / "garden", root, dirs_exist_ok=True)
    res = run_cli(
        "run",
        "What is on the to-do list?",
        "--model",
        f"script:{EXAMPLES / 'garden-session.jsonl'}",
        cwd=root,
    )
    assert res.code == 0, res.out + res.err
    (segment,) = (root / ".runfold" / "ledger").glob("ledger-*.jsonl")
    lines = segment.read_bytes().split(b"\n")
    assert b'"kind":"model_returned"' in lines[5]
    lines[5] = lines[5].replace(b'"text":"L', b'"text":"X', 1)  # seq 5: one byte, still canonical
    assert lines[5].count(b'"text":"X') == 1
    segment.write_bytes(b"\n".join(lines))
    return root


@pytest.mark.parametrize(
    "args",
    [
        ("log", "--limit", "6"),
        ("log", "--limit", "6", "--json"),
        ("log", "--kind", "model_returned", "--limit", "1"),
        ("log", "--since", "3", "--limit", "3"),
        ("show", "5"),
        ("verify",),
    ],
)
def test_a_line_edited_in_place_is_refused_by_every_reader_that_reaches_it(
    edited: Path, args: tuple[str, ...]
) -> None:
    res = run_cli(*args, cwd=edited)
    assert res.code == 1, f"{args}: {res.out}"
    assert "E_LEDGER_CORRUPT" in res.err and "line 6 (seq 5)" in res.err, res.err
    assert "Xet me look" not in res.out  # the edited text is not printed as if it were sound


def test_lines_before_the_edit_still_print_when_nothing_else_noticed_it(edited: Path) -> None:
    res = run_cli("log", "--limit", "5", cwd=edited)
    assert res.code == 0, res.err
    assert len(res.out.splitlines()) == 5
