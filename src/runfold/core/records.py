"""A ledger line as runfold sees it: the envelope plus its typed payload (DESIGN.md §3–§4).

`Record` is what readers hand to folds; `raw` keeps the exact bytes so nothing is re-encoded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from runfold.core.canonical import Envelope
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.kinds import KNOWN_KIND_NAMES, Kind

if TYPE_CHECKING:  # the payload classes load on the first payload read: verify never needs them
    from runfold.core.payloads import Payload

P = TypeVar("P", bound="Payload")


class Record(NamedTuple):
    """A verified line: its envelope, its exact bytes (no newline), and its chain hash.

    An immutable NamedTuple: readers and the writer build one per line, and a tuple is built
    several times faster than a frozen dataclass.
    """

    env: Envelope
    raw: bytes
    hash: str

    @property
    def seq(self) -> int:
        return self.env.seq

    @property
    def run(self) -> str:
        return self.env.run

    @property
    def kind_name(self) -> str:
        return self.env.kind

    @property
    def known(self) -> bool:
        """False for an unknown kind carried with `ig:true`; folds skip such lines."""
        return self.env.kind in KNOWN_KIND_NAMES

    @property
    def kind(self) -> Kind:
        """The line's kind; raises `E_LOG_VERSION_UNSUPPORTED` for an unknown (ig) kind."""
        if not self.known:
            raise RunfoldError(
                ErrorCode.LOG_VERSION_UNSUPPORTED,
                f"read kind {self.env.kind!r}",
                f"seq {self.seq}",
                "skip lines whose kind is unknown (check `record.known` first)",
            )
        return Kind(self.env.kind)

    def payload(self) -> Payload:
        """The typed payload. Raises `E_LEDGER_CORRUPT` naming seq and field when unreadable."""
        try:
            return _payloads()[1](self.kind, self.env.data)
        except RunfoldError as exc:
            raise RunfoldError(
                ErrorCode.LEDGER_CORRUPT,
                f"read the {self.env.kind} payload at seq {self.seq} ({exc.subject})",
                f"run {self.run}",
                "the line verifies but its payload does not match its kind; report it with `runfold show "
                f"{self.seq}` and restore the ledger from a copy",
            ) from None

    def typed(self, cls: type[P]) -> P:
        """The payload as `cls`; raises TypeError when the line is of another kind."""
        p = self.payload()
        if not isinstance(p, cls):
            raise TypeError(f"seq {self.seq} is {self.env.kind}, not {cls.KIND}")
        return p


_payload_api: tuple[type[Payload], Callable[[Kind, dict[str, Any]], Payload]] | None = None
"""`runfold.core.payloads`' `Payload` class and `read_payload`, once a payload was read or
written (an import statement in `Record.payload` or `Draft.data_object` would cost
microseconds on every call, and both run once per line)."""


def _payloads() -> tuple[type[Payload], Callable[[Kind, dict[str, Any]], Payload]]:
    global _payload_api
    if _payload_api is None:
        from runfold.core.payloads import Payload, read_payload

        _payload_api = (Payload, read_payload)
    return _payload_api


@dataclass(frozen=True, slots=True)
class Draft:
    """A line not yet written: the writer assigns `v`, `seq`, `prev` and (when None) `t`.

    `data` is a typed payload (its KIND must equal `kind`) or, for foreign or unknown kinds, a
    raw JSON object (checked by `encode_line`).
    """

    run: str
    who: str
    kind: str
    data: Payload | dict[str, Any]
    addr: str | None = None
    ig: bool = False
    t: int | None = None

    def data_object(self) -> dict[str, Any]:
        """The payload as a JSON object; raises TypeError when a typed payload's KIND differs.
        Data that is neither is returned as given, for `encode_line` to refuse naming the field."""
        if isinstance(self.data, dict):
            return self.data
        payload_class, _ = _payloads()
        if not isinstance(self.data, payload_class):
            return cast("dict[str, Any]", self.data)  # neither: `encode_line` refuses it, naming the field
        if self.data.KIND.value != self.kind:
            raise TypeError(f"draft of kind {self.kind} carries a {self.data.KIND} payload")
        return self.data.to_data()
