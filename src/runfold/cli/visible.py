"""Control characters made visible before anything reaches a terminal.

Recorded text (a model's reply, a tool's output, the person's or another agent's words) may hold
escape sequences that retitle, clear or repaint the terminal. Every human-readable printer goes
through `visible` (the consoles of `cli.common` apply it to all they print); `--json` output does
not, so it stays exact.
"""

from __future__ import annotations

_KEPT = frozenset("\n\t")

_TABLE: dict[int, str] = {
    **{c: chr(0x2400 + c) for c in range(0x20) if chr(c) not in _KEPT},  # ␀ … ␟ (␛ for ESC)
    0x7F: "␡",
    **{c: "�" for c in range(0x80, 0xA0)},  # C1 controls (CSI 0x9b, OSC 0x9d, ...)
}
"""One visible character for each control character: the Unicode control pictures for C0 and
DEL, U+FFFD for C1. One for one, so positions in a styled text stay valid."""


def visible(text: str) -> str:
    """`text` with every control character but newline and tab replaced by a visible character of
    the same length (`\\x1b` → `␛`, `\\x07` → `␇`, `\\r` → `␍`, C1 → `�`)."""
    return text.translate(_TABLE)
