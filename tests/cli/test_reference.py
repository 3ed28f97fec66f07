"""The command reference is generated from the commands (`runfold.cli.reference`): the README's
table of commands, docs/cli.md and the verb table of `runfold --help` are what cog writes, so every
command and option that exists is documented; and the README's examples all run, from a clone,
without leaving a file in it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from cogapp import Cog
from test_readme import _SETUP, LOCAL_MARK, MARK, README, REPO, fenced_sh_blocks, marked_blocks

from pg_support import workspace_url
from runfold.cli.reference import REGENERATE, command_names, help_text

CLI_DOC = REPO / "docs" / "cli.md"
VERB_TABLE = REPO / "src" / "runfold" / "cli" / "main.py"


def test_readme_cli_doc_and_verb_table_are_what_the_commands_generate() -> None:
    status = Cog().main(["cog", "--check", str(VERB_TABLE), str(README), str(CLI_DOC)])
    assert status == 0, f"stale command reference: run `{REGENERATE}`"


def test_the_documents_give_the_whole_regeneration_command() -> None:
    # regenerating the README and docs/cli.md alone leaves the verb table of `runfold --help` stale
    for path in (README, CLI_DOC, REPO / "src" / "runfold" / "cli" / "reference.py"):
        text = path.read_text(encoding="utf-8")
        assert REGENERATE in text, path
        assert "cog -r" not in text.replace(REGENERATE, ""), path


def test_every_command_is_in_the_readme_and_its_help_in_the_cli_doc() -> None:
    readme, doc = README.read_text(encoding="utf-8"), CLI_DOC.read_text(encoding="utf-8")
    names = command_names()
    assert {"fork", "why", "conversation", "validate", "run", "resume"} <= set(names)
    for name in names:
        assert f"[`runfold {name}`](docs/cli.md#runfold-{name})" in readme
        assert f"## runfold {name}\n\n```text\n{help_text(name)}```" in doc


def test_every_shell_example_in_the_readme_is_executed() -> None:
    text = README.read_text(encoding="utf-8")
    marked = len(marked_blocks()) + text.count(LOCAL_MARK)
    setup = 1  # the test command: it is the suite itself, run by .ci/run
    assert len(fenced_sh_blocks()) == marked + setup
    assert re.search(r"^" + re.escape(MARK) + r"\n```sh\ncd \"\$\(mktemp -d\)\"", text, re.M)


def test_the_readme_examples_leave_nothing_in_the_clone(tmp_path: Path, postgres: str) -> None:
    """Run one after the other in one shell from a clone, as a reader pastes them."""
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "examples", clone / "examples")
    script = "\n".join(
        line for block in marked_blocks() for line in block.splitlines() if not _SETUP.search(line)
    )
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "TMPDIR": str(tmp_path)})
    env["STORE"] = workspace_url(postgres)  # the PostgreSQL example's server
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in clone.iterdir()) == ["examples"]
