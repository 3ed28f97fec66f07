"""Which values are secrets, and their replacement in the text of a line (DESIGN.md §4, §9).

A secret is known by the name of the environment variable holding it (`*_KEY`, `*_TOKEN`, ...),
by its shape (a URL carrying `user:password@`, a well-known key format such as `sk-…`, `ghp_…`,
`AKIA…`), or because runfold was handed it (a provider's API key). Pure: the caller passes the
environment and the keys in; nothing here reads `os.environ`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runfold.core.canonical import Json

SECRET_NAME_SUFFIXES: tuple[str, ...] = (
    "_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASSWD", "_PWD", "_PAT", "_JWT", "_DSN",
    "_CREDENTIAL", "_CREDENTIALS",
)  # fmt: skip
"""A variable whose upper-cased name ends with one of these holds a secret (`MYSQL_PWD`)."""
SECRET_NAME_PARTS: tuple[str, ...] = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
"""A variable whose upper-cased name contains one of these holds a secret (`GITHUB_TOKEN_FILE`)."""
AUTH_PART = re.compile(r"(?:^|_)AUTH(?:$|_|ORIZATION|TOKEN|KEY)")
"""`*_AUTH*` as a word: `NPM_CONFIG__AUTH`, `DOCKER_AUTH_CONFIG`, `HTTP_AUTHORIZATION`, but not
`GIT_AUTHOR_NAME`."""
SECRET_NAMES: frozenset[str] = frozenset(
    {
        "PASSPHRASE", "AUTH", "NETRC", "SSH_AUTH_SOCK", "DATABASE_URL", "PGPASSWORD",
        "REDIS_URL", "MONGODB_URI", "MONGO_URL", "AMQP_URL", "GITHUB_PAT", "GH_PAT", "HF_TOKEN",
    }
)  # fmt: skip
"""Names that hold secrets whatever their shape (a connection URL may carry its password)."""

CREDENTIAL_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/:@\"'<>]*:([^\s/@\"'<>]+)@")
"""A URL carrying `user:password@` or `:password@` (a proxy, a database DSN, `redis://:pw@host`);
group 1 is the password."""
KEY_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sk- key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]|github_pat)_[A-Za-z0-9_]{20,}")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    (
        "private key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    ),
)
"""Well-known key formats, replaced wherever they appear (named by the format, never the value)."""
MIN_SECRET_CHARS = 6
"""A named variable's value shorter than this (`1`, `true`) is kept out of `exec` but not
searched for in text: replacing every `1` would corrupt the ledger's text, not protect a key."""
REPLACEMENT = "[secret:{name}]"
"""What a secret's value is replaced with: `[secret:OPENAI_API_KEY]`, `[secret:sk- key]`."""


def is_secret_name(name: str) -> bool:
    """True when an environment variable of this name holds a secret (see the name rules above)."""
    upper = name.upper()
    return (
        upper in SECRET_NAMES
        or upper.endswith(SECRET_NAME_SUFFIXES)
        or any(part in upper for part in SECRET_NAME_PARTS)
        or AUTH_PART.search(upper) is not None
    )


def has_secret_shape(value: str) -> bool:
    """True when `value` carries a credential by its shape: a URL with `user:password@`, or a
    well-known key format."""
    return CREDENTIAL_URL.search(value) is not None or any(p.search(value) for _, p in KEY_SHAPES)


def is_secret(name: str, value: str) -> bool:
    """True when the variable `name=value` is a secret, by name or by the shape of its value."""
    return is_secret_name(name) or has_secret_shape(value)


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` without its secrets (`is_secret`); PATH, HOME, LANG, TERM and every other
    variable are kept."""
    return {k: v for k, v in env.items() if not is_secret(k, v)}


def secret_values(env: Mapping[str, str], extra: Mapping[str, str] = {}) -> dict[str, str]:
    """value → name of every secret worth searching for: the secret variables of `env` (their
    whole value, and the password of a credential URL) and `extra` (name → value, e.g. a
    provider's key), each at least MIN_SECRET_CHARS long. The first name seen for a value wins."""
    out: dict[str, str] = {}
    for name, value in [*extra.items(), *env.items()]:
        if name not in extra and not is_secret(name, value):
            continue
        for candidate in (value, *(m.group(1) for m in CREDENTIAL_URL.finditer(value))):
            if len(candidate) >= MIN_SECRET_CHARS:
                out.setdefault(candidate, name)
    return out


@dataclass
class Redaction:
    """What one redaction replaced: `count` replacements, the `names` of what was replaced
    (variable names or key formats, sorted), and `where` (the fields, dotted, sorted)."""

    count: int = 0
    names: set[str] = field(default_factory=set)
    where: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.count > 0


class Redactor:
    """Replaces secrets in text and in JSON values.

    `values`: value → name (`secret_values`); each occurrence of a value becomes
    `[secret:<name>]`, longest values first; then credential URLs' passwords and well-known key
    formats are replaced by shape. Replacement never creates a new match, so `redact` of its
    own output changes nothing (idempotent)."""

    def __init__(self, values: Mapping[str, str] = {}) -> None:
        self.values = dict(values)
        ordered = sorted(self.values, key=len, reverse=True)
        self._exact = re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None

    def redact_text(self, text: str, where: str, found: Redaction) -> str:
        """`text` with every secret replaced; what was replaced is added to `found`."""
        n0 = found.count

        def exact(m: re.Match[str]) -> str:
            name = self.values[m.group(0)]
            found.count += 1
            found.names.add(name)
            return REPLACEMENT.format(name=name)

        if self._exact is not None:
            text = self._exact.sub(exact, text)

        def url(m: re.Match[str]) -> str:
            if m.group(1).startswith("[secret:"):
                return m.group(0)
            found.count += 1
            found.names.add("credential URL")
            start, end = m.span(1)
            whole = m.group(0)
            base = m.start(0)
            return whole[: start - base] + REPLACEMENT.format(name="password") + whole[end - base :]

        text = CREDENTIAL_URL.sub(url, text)
        for label, pattern in KEY_SHAPES:

            def shaped(m: re.Match[str], label: str = label) -> str:
                found.count += 1
                found.names.add(label)
                return REPLACEMENT.format(name=label)

            text = pattern.sub(shaped, text)
        if found.count > n0:
            found.where.add(where)
        return text

    def redact(self, value: Json, where: str, found: Redaction) -> Json:
        """`value` with secrets replaced in every string (object keys included); `where` names
        the value (`data`), extended per field (`data.message.content`); list indices are not
        named, so `where` stays short."""
        if isinstance(value, str):
            return self.redact_text(value, where, found)
        if isinstance(value, dict):
            out: dict[str, Json] = {}
            for k, v in value.items():
                out[self.redact_text(k, where, found)] = self.redact(v, f"{where}.{k}", found)
            return out
        if isinstance(value, list):
            return [self.redact(v, where, found) for v in value]
        return value


def redactor_for(env: Mapping[str, str], keys: Iterable[tuple[str, str]] = ()) -> Redactor:
    """The redactor of a run: the secrets of `env` and the `keys` runfold holds (name, value)."""
    return Redactor(secret_values(env, dict(keys)))
