"""The error shape (§11), run ids (§3), addresses (§9) and locators (§3)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runfold.core.address import address_problem, is_reserved, is_within, parse_address
from runfold.core.errors import ErrorCode, Gate, Retry, RunfoldError
from runfold.core.ids import (
    WORKSPACE_RUN,
    is_run_id,
    run_id_time_ms,
    run_id_v7,
    runs_with_prefix,
    short_run_ids,
)
from runfold.core.locator import CasLocator, FileLocator, parse_locator

DESIGN_CODES = {
    "E_INVALID_ARGS",
    "E_PATH_NOT_FOUND",
    "E_TOOL_UNKNOWN",
    "E_TIMEOUT",
    "E_OUTSIDE_WRITE_DOMAIN",
    "E_GATE_DENIED",
    "E_PROVIDER",
    "E_TOOL_OUTCOME_UNKNOWN",
    "E_EVIDENCE_MISSING",
    "E_LOOP_SUSPECTED",
    "E_BUDGET_EXHAUSTED",
    "E_CONFIG_INVALID",
    "E_LEDGER_CORRUPT",
    "E_STORAGE_FATAL",
    "E_WIRE_MISMATCH",
    "E_LOG_VERSION_UNSUPPORTED",
    "E_LEDGER_HELD",
    "E_INTERNAL",
}


def test_error_codes_are_exactly_the_design_codes() -> None:
    assert {c.value for c in ErrorCode} == DESIGN_CODES


def test_display_form_and_payload_round_trip() -> None:
    err = RunfoldError(
        ErrorCode.OUTSIDE_WRITE_DOMAIN,
        "write",
        "other/room/a.txt",
        "write inside lab/room1 instead",
        nearby=("lab/room1",),
        retry=Retry.NO,
        gate=Gate("writes stay in the room", "other/room is outside lab/room1", "write to lab/room1/a.txt"),
    )
    assert err.display() == (
        "E_OUTSIDE_WRITE_DOMAIN: cannot write on other/room/a.txt — write inside lab/room1 instead"
    )
    assert str(err) == err.display()
    again = RunfoldError.from_data(err.to_data())
    assert again.to_data() == err.to_data()


def test_errors_pickle_as_themselves() -> None:
    """An error raised in another process (a Ray actor, a worker) arrives as the same error,
    subclasses with their own constructors included."""
    from runfold.core.chain import Fault, refuse
    from runfold.providers.base import ProviderError
    from runfold.tools.results import ToolError

    errors: list[RunfoldError] = [
        RunfoldError(ErrorCode.LEDGER_HELD, "open the writer", "ws", "stop the server", retry=Retry.YES,
                     gate=Gate("one writer", "held", "wait")),
        ProviderError("HTTP 529", status=529, retryable=True, retry_after_ms=40, refused=False),
        ToolError(ErrorCode.TIMEOUT, "run tool", "exec", "raise the timeout", detail={"ms": 5}),
        refuse(Fault.CHAIN_BREAK, 7, 6, "prev differs"),
    ]  # fmt: skip
    for err in errors:
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err)
        assert again.__dict__ == err.__dict__ and str(again) == str(err) and again.args == err.args


def test_recovery_is_mandatory() -> None:
    with pytest.raises(ValueError):
        RunfoldError(ErrorCode.TIMEOUT, "run tool", "exec", "  ")


@given(st.integers(0, (1 << 48) - 1), st.binary(min_size=10, max_size=10))
def test_run_id_v7_layout(ms: int, rand: bytes) -> None:
    rid = run_id_v7(ms, rand)
    assert is_run_id(rid)
    assert rid[14] == "7" and rid[19] in "89ab"
    assert run_id_time_ms(rid) == ms


@pytest.mark.parametrize(
    "bad",
    ["", "/abs", "a/", "a//b", "a/./b", "../x", "a/..", "C:/x", "a\\b", "a:b", "a\x01b", "/"],
)
def test_bad_addresses_are_refused(bad: str) -> None:
    assert address_problem(bad) is not None
    with pytest.raises(RunfoldError) as err:
        parse_address(bad)
    assert err.value.code is ErrorCode.INVALID_ARGS


def test_good_addresses_and_write_domains() -> None:
    assert parse_address("lab/room1") == "lab/room1"
    assert parse_address("été/salle") == "été/salle"
    assert is_within("lab/room1/sub", "lab/room1")
    assert not is_within("lab/room10", "lab/room1")
    assert is_reserved("lab/.runfold/x") and not is_reserved("lab/runfold")


def test_locators() -> None:
    h = "a" * 64
    assert parse_locator(f"cas:b3-{h}") == CasLocator(h)
    loc = parse_locator(f"cas:b3-{h}#L2-3")
    assert isinstance(loc, CasLocator) and str(loc) == f"cas:b3-{h}#L2-3"
    assert loc.slice(b"one\ntwo\nthree\nfour\n") == b"two\nthree\n"
    byte_loc = parse_locator(f"cas:b3-{h}#B1-2")
    assert isinstance(byte_loc, CasLocator) and byte_loc.slice(b"abcd") == b"bc"
    assert parse_locator("file:sim/lobby/room1@8ea61adc") == FileLocator("sim/lobby/room1", "8ea61adc")
    for bad in [f"cas:b3-{h}#L3-2", f"cas:b3-{h}#L0-1", "cas:b3-XYZ", "http://x"]:
        with pytest.raises(RunfoldError):
            parse_locator(bad)


@given(st.lists(st.tuples(st.integers(0, 3), st.binary(min_size=10, max_size=10)), min_size=1, max_size=30))
def test_short_run_ids_are_unique_prefixes(specs: list[tuple[int, bytes]]) -> None:
    # runs started within the same few ms share their first 8+ characters
    runs = [run_id_v7(1_700_000_000_000 + ms, rand) for ms, rand in specs]
    names = short_run_ids(runs)
    assert len(set(names.values())) == len(set(runs))
    for run, name in names.items():
        assert run.startswith(name) and len(name) >= 8 and not name.endswith("-")
        assert [r for r in set(runs) if r.startswith(name)] == [run]
        assert runs_with_prefix(name, runs) == [run]  # what is printed resolves back


@given(
    st.lists(st.tuples(st.integers(0, 3), st.binary(min_size=10, max_size=10)), min_size=1, max_size=20),
    st.integers(0, 19),
    st.integers(1, 36),
    st.sampled_from(["as is", "no hyphens", "upper", "blanks"]),
)
def test_runs_with_prefix_is_every_run_starting_so_hyphens_case_and_blanks_aside(
    specs: list[tuple[int, bytes]], pick: int, length: int, spelling: str
) -> None:
    runs = [run_id_v7(1_700_000_000_000 + ms, rand) for ms, rand in specs]
    prefix = runs[pick % len(runs)][:length]
    given_as = {
        "as is": prefix,
        "no hyphens": prefix.replace("-", ""),
        "upper": prefix.upper(),
        "blanks": f"  {prefix}\t",
    }[spelling]
    found = runs_with_prefix(given_as, runs)
    if not prefix.replace("-", ""):
        assert found == []
        return
    key = prefix.replace("-", "")
    assert found == list(dict.fromkeys(r for r in runs if r.replace("-", "").startswith(key)))
    assert runs[pick % len(runs)] in found


@pytest.mark.parametrize("nothing", ["", "   ", "-", "--", " - "])
def test_a_prefix_of_nothing_but_blanks_and_hyphens_names_no_run(nothing: str) -> None:
    assert runs_with_prefix(nothing, [run_id_v7(1_700_000_000_000, bytes(10))]) == []


def test_short_run_ids_name_the_workspace_run() -> None:
    assert short_run_ids([WORKSPACE_RUN])[WORKSPACE_RUN] == "workspace"


@dataclasses.dataclass(eq=False, slots=True)
class _SlottedError(RunfoldError):
    attempt: int = 0


class _ExtraSlot(RunfoldError):
    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        super().__init__(ErrorCode.TIMEOUT, "wait", where, "wait longer")
        self.where = where


def test_errors_with_slots_pickle_as_themselves() -> None:
    """A subclass keeping fields in slots (a `slots=True` dataclass, `__slots__`) pickles them
    too; they are not in `__dict__`."""
    for err in (
        _SlottedError(ErrorCode.TIMEOUT, "run tool", "exec", "raise the timeout", attempt=3),
        _ExtraSlot("the inbox"),
    ):
        err.add_note("crossed a process")
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == str(err) and again.args == err.args
        assert again.to_data() == err.to_data() and again.__notes__ == ["crossed a process"]
    assert pickle.loads(pickle.dumps(_SlottedError(ErrorCode.TIMEOUT, "a", "b", "c", attempt=3))).attempt == 3
    assert pickle.loads(pickle.dumps(_ExtraSlot("x"))).where == "x"
