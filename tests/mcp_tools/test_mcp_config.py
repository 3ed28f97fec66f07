"""`[mcp.<name>]` tables are checked key by key, and MCP tool names always fit the providers'
tool-name grammar."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runfold.core.errors import RunfoldError
from runfold.runtime.config import DEFAULT_CONFIG_TOML, parse_config
from runfold.tools.mcp import SERVER_NAME, McpServer, table_name
from runfold.tools.registry import TOOL_NAME


def test_stdio_and_http_servers_parse_in_file_order() -> None:
    config = parse_config(
        {
            "mcp": {
                "files": {"command": "npx", "args": ["-y", "server"], "env": {"A": "1"}},
                "web": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${T}"}},
            }
        }
    )
    assert config.mcp == (
        McpServer(name="files", command="npx", args=("-y", "server"), env={"A": "1"}),
        McpServer(name="web", url="http://127.0.0.1:1/mcp", headers={"Authorization": "Bearer ${T}"}),
    )
    assert [s.transport for s in config.mcp] == ["stdio", "http"]


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"x": {"command": "a", "argz": []}}, "did you mean args"),
        ({"x": {"command": "a", "url": "http://h/mcp"}}, "exactly one of `command`"),
        ({"x": {}}, "exactly one of `command`"),
        ({"x": {"url": "ftp://h"}}, "mcp.x.url"),
        ({"x": {"command": "a", "args": "b"}}, "mcp.x.args"),
        ({"x": {"command": "a", "env": {"A": 1}}}, "mcp.x.env"),
        ({"x": {"url": "http://h/mcp", "env": {"A": "1"}}}, "belong to a stdio server"),
        ({"x y": {"command": "a"}}, "1-32 letters"),
        ({"x": "npx"}, "make it a table"),
    ],
)
def test_a_bad_table_is_one_clear_error_naming_the_key(table: dict[str, object], named: str) -> None:
    with pytest.raises(RunfoldError) as info:
        parse_config({"mcp": table}, "config.toml")
    assert info.value.code.value == "E_CONFIG_INVALID"
    assert named in info.value.display()


def test_the_default_config_documents_mcp_and_parses() -> None:
    import tomllib

    assert "[mcp.files]" in DEFAULT_CONFIG_TOML
    block = DEFAULT_CONFIG_TOML[DEFAULT_CONFIG_TOML.index("# [mcp.files]") :]
    section = "\n".join(line.removeprefix("# ") for line in block.splitlines())
    assert len(parse_config(tomllib.loads(section)).mcp) == 2


@given(
    server=st.from_regex(SERVER_NAME, fullmatch=True),
    tool=st.text(min_size=1, max_size=200),
)
def test_table_names_fit_the_provider_grammar_and_stay_distinct(server: str, tool: str) -> None:
    name = table_name(server, tool)
    assert not TOOL_NAME.match("read\n")  # a trailing newline is no part of the grammar (hypothesis found it)
    assert TOOL_NAME.match(name)
    assert name == f"{server}__{tool}" or not TOOL_NAME.match(f"{server}__{tool}") or len(f"{server}__{tool}") > 64
    other = table_name(server, tool + "x")
    assert other != name
