"""Which values are secrets and their replacement (core.secrets): the names and shapes of the
rule, and the invariants of the redactor (no secret survives; redacting twice changes nothing)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.core.secrets import (
    Redaction,
    Redactor,
    has_secret_shape,
    is_secret,
    is_secret_name,
    redactor_for,
    scrub_env,
    secret_values,
)

ISSUE_ENV = {
    "MYSQL_PWD": "my-sql-pw-1234",
    "SENTRY_DSN": "https://abc123publickey@o42.ingest.sentry.io/77",
    "HTTPS_PROXY": "http://proxyuser:pr0xy-pw-77@proxy.internal:3128",
    "REDIS_URL": "redis://:r3dis-secret-pw@cache.internal:6379/0",
    "MONGODB_URI": "mongodb+srv://admin:m0ngo-pass-99@cluster0.example.net/db",
    "NPM_CONFIG__AUTH": "bnBtdXNlcjpucG1wYXNzd29yZA==",
    "AZURE_DEVOPS_EXT_PAT": "azdevpat0123456789abcdef",
    "DOCKER_AUTH_CONFIG": '{"auths":{"r.example":{"auth":"ZG9ja2VyOnB3"}}}',
    "CI_JOB_JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjaSJ9.c2lnbmF0dXJl",
    "PASSPHRASE": "correct horse battery staple",
    "STRIPE_API_KEY": "rk_live_0123456789abcdef",
    "VAULT_TOKEN": "hvs.CAESIvault0123456789",
    "APP_SECRET": "app-secret-0123456789",
    "DB_PASSWORD": "db-password-0123",
}
"""Every variable the issue's tester found on the ledger, and one of each name rule."""

SHAPED = {
    "OPENAI_BASE": "sk-proj-abcdefghijklmnopqrstuvwx0123",
    "SOME_GH": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "SOME_AWS": "AKIAIOSFODNN7EXAMPLE",
    "SOME_SLACK": "xoxb-123456789012-abcdefghijkl",
    "UPSTREAM": "postgres://app:pg-pass-1@db.internal:5432/app",
}
"""Values secret by their shape, under names that say nothing."""


@pytest.mark.parametrize("name", sorted(ISSUE_ENV))
def test_the_issue_names_are_secret(name: str) -> None:
    assert is_secret(name, ISSUE_ENV[name])


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "GIT_AUTHOR_NAME", "AUTHOR", "TERM", "HTTPS_PROXY"])
def test_ordinary_names_are_not(name: str) -> None:
    assert not is_secret_name(name)
    assert not is_secret(name, "http://proxy.internal:3128")  # a proxy without credentials is kept


@pytest.mark.parametrize("name", sorted(SHAPED))
def test_shapes_are_secret_whatever_the_name(name: str) -> None:
    assert not is_secret_name(name) and has_secret_shape(SHAPED[name])


def test_scrub_env_keeps_the_ordinary_and_drops_every_secret() -> None:
    env = {**ISSUE_ENV, **SHAPED, "PATH": "/bin", "HOME": "/root", "NO_PROXY": "localhost"}
    assert scrub_env(env) == {"PATH": "/bin", "HOME": "/root", "NO_PROXY": "localhost"}


def test_every_value_and_password_is_replaced_and_named() -> None:
    env = {**ISSUE_ENV, **SHAPED}
    red = redactor_for(env, [("PROVIDER_KEY", "pk-the-providers-own-key")])
    text = " / ".join(env.values()) + " and pk-the-providers-own-key and pw alone: pr0xy-pw-77"
    found = Redaction()
    out = red.redact_text(text, "tool_result.result.stdout", found)
    for value in [*env.values(), "pk-the-providers-own-key", "pr0xy-pw-77", "m0ngo-pass-99"]:
        assert value not in out
    assert "[secret:PROVIDER_KEY]" in out and "[secret:MYSQL_PWD]" in out
    assert found.where == {"tool_result.result.stdout"} and found.count >= len(env) + 2
    assert "pr0xy-pw-77" not in str(found.names)


def test_short_values_are_kept_out_of_exec_but_not_searched() -> None:
    assert secret_values({"FEATURE_TOKEN": "1"}) == {}
    assert scrub_env({"FEATURE_TOKEN": "1"}) == {}


VALUES = st.sampled_from([*ISSUE_ENV.values(), *SHAPED.values()])


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.one_of(st.text(max_size=20), VALUES), max_size=8))
def test_no_secret_survives_and_a_second_pass_changes_nothing(parts: list[str]) -> None:
    red = Redactor(secret_values({**ISSUE_ENV, **SHAPED}))
    text = "".join(parts)
    once = red.redact({"a": [text, {"b": text}]}, "data", Redaction())
    assert isinstance(once, dict)
    for value in [*ISSUE_ENV.values(), *SHAPED.values()]:
        assert value not in str(once)
    again = Redaction()
    assert red.redact(once, "data", again) == once and again.count == 0
