"""`runfold` loads a verb's module only when the verb is used (`runfold.cli.main.LazyGroup`):
the verb table `runfold --help` lists without loading anything must say what the loaded verbs
say, at every terminal width, and using one verb must not load the others."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import GOLDEN_RUN, run_cli
from typer._click import Context
from typer._click.utils import make_default_short_help

from runfold.cli.main import COMMANDS, GROUP_MODULES, command_group
from runfold.cli.reference import command_names


def test_the_verb_table_names_every_verb_in_help_order() -> None:
    assert list(COMMANDS) == command_names()
    assert {module for module, _ in COMMANDS.values()} == set(GROUP_MODULES)


@pytest.mark.parametrize("limit", [12, 30, 45, 61, 74, 200])
def test_each_summary_shortens_as_the_loaded_verb_does(limit: int) -> None:
    group = command_group()
    group.load_all()
    for name, (_, summary) in COMMANDS.items():
        assert make_default_short_help(summary, limit) == group.get_command(None, name).get_short_help_str(limit), name


@pytest.mark.parametrize("width", [50, 80, 120])
def test_root_help_is_the_same_before_and_after_every_verb_loads(width: int) -> None:
    def help_at(group: object) -> str:
        assert hasattr(group, "get_help")
        return str(group.get_help(Context(group, info_name="runfold", terminal_width=width, max_content_width=width)))  # type: ignore[arg-type]

    lazy = command_group()
    listed = help_at(lazy)
    assert lazy.commands == {}  # listing loaded nothing
    loaded = command_group()
    loaded.load_all()
    assert help_at(loaded) == listed
    assert "  verify " in listed and "  mcp " in listed


def test_using_one_verb_loads_only_its_module() -> None:
    group = command_group()
    assert group.get_command(None, "verify") is not None
    assert set(group.commands) == {name for name, (module, _) in COMMANDS.items() if module == "ledger_cmds"}
    assert group.get_command(None, "no-such-verb") is None


def test_a_mistyped_verb_is_answered_with_the_verbs_it_is_close_to(tmp_path: Path) -> None:
    r = run_cli("verfy", cwd=tmp_path)
    assert r.code == 2
    assert "No such command 'verfy'. Did you mean 'verify'?" in r.err
    assert "Did you mean" not in run_cli("zzzzzz", cwd=tmp_path).err


def test_one_group_runs_a_verb_again_and_after_other_verbs_as_a_fresh_group_does(
    golden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chat's /-commands and the crash tests run verb after verb in one process, the crash tests
    # through one group: a verb's second use, or its use after others, must print what it prints alone
    import typer.testing

    argvs = [
        ("show", "3", "-w", golden),
        ("log", "-w", golden, "--limit", "4"),
        ("runs", "-w", golden, "--json"),
        ("mcp", "--help"),
        ("mcp", "list", "--bogus"),
        ("conversation", GOLDEN_RUN, "-w", golden),
        ("verfy",),
        ("show", "x", "-w", golden, "--json"),
        ("--help",),
    ]
    alone = [run_cli(*argv, cwd=tmp_path) for argv in argvs]
    assert [r.code for r in alone] == [0, 0, 0, 0, 2, 0, 2, 2, 0], [r.err for r in alone]
    shared = command_group()
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: shared)
    for _ in range(2):
        assert [run_cli(*argv, cwd=tmp_path) for argv in argvs] == alone
    used = {"ledger_cmds", "fold_cmds", "mcp_cmds"}
    assert set(shared.commands) == {name for name, (module, _) in COMMANDS.items() if module in used}


def test_debug_shows_the_traceback_of_a_verb_module_that_fails_to_load(
    golden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a verb's module loads while its name is resolved, before the root's callback notes --debug
    import sys

    monkeypatch.setitem(sys.modules, "runfold.cli.ledger_cmds", None)  # as a broken install would
    plain = run_cli("verify", golden, cwd=tmp_path)
    assert plain.code == 4 and "internal error: ModuleNotFoundError" in plain.err and "--debug" in plain.err
    with pytest.raises(ModuleNotFoundError, match=r"runfold\.cli\.ledger_cmds"):
        run_cli("--debug", "verify", golden, cwd=tmp_path)
