"""Charts drawn on the server as inline SVG: tokens and cost per turn, and the window's bytes by
region and by cause. Every label goes through `markupsafe.escape`; each shape carries its
figure in a `data-` attribute, so a test (or a person) reads the numbers the chart was drawn from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#86bcb6",
    "#d37295",
    "#a0cbe8",
    "#8cd17d",
)
TOKEN_KEYS = ("input", "cache_read", "cache_write", "output")
_TOKEN_COLOURS = dict(zip(TOKEN_KEYS, PALETTE, strict=False))
_USAGE_STYLE = "<style>.axis{font:11px sans-serif;fill:#66707a}.cost{fill:#d62728}</style>"
"""The usage chart is its own SVG document (an `img`): it carries its own style."""


@dataclass(frozen=True)
class Turn:
    """One reply of a run: its `seq`, tokens per `TOKEN_KEYS` (None: no usage recorded) and
    cost in micro-USD (None: unknown)."""

    seq: int
    tokens: Mapping[str, int] | None
    cost_usd_micros: int | None


def colour(i: int) -> str:
    """The i-th colour of the palette (cycled)."""
    return PALETTE[i % len(PALETTE)]


def usage_svg(turns: Sequence[Turn], width: int = 900, height: int = 220) -> Markup:
    """Stacked bars of each turn's tokens (input, cache read, cache write, output) with its cost
    as dots on a second scale; a run with no reply gives a one-line note (still an SVG)."""
    if not turns:
        return Markup(
            f'<svg class="chart usage" role="img" viewBox="0 0 {width} 40" width="100%" '
            'xmlns="http://www.w3.org/2000/svg" aria-label="no model replies yet">'
            f"{_USAGE_STYLE}"
            '<text x="8" y="24" class="axis">no model replies yet</text></svg>'
        )
    pad_l, pad_b, pad_t = 56, 28, 14
    plot_w, plot_h = width - pad_l - 60, height - pad_b - pad_t
    totals = [sum((t.tokens or {}).get(k, 0) for k in TOKEN_KEYS) for t in turns]
    top = max(max(totals), 1)
    costs = [t.cost_usd_micros for t in turns]
    top_cost = max([c for c in costs if c is not None] or [0]) or 1
    step = plot_w / len(turns)
    bar_w = max(step * 0.7, 1.0)
    parts = [
        f'<svg class="chart usage" role="img" viewBox="0 0 {width} {height}" width="100%" '
        f'xmlns="http://www.w3.org/2000/svg" aria-label="tokens and cost per turn">{_USAGE_STYLE}',
        f'<text x="4" y="{pad_t + 8}" class="axis">{top:,}</text>',
        f'<text x="4" y="{pad_t + plot_h}" class="axis">0</text>',
        f'<text x="{width - 56}" y="{pad_t + 8}" class="axis">${top_cost / 1e6:.4f}</text>',
    ]
    for i, (turn, total) in enumerate(zip(turns, totals, strict=True)):
        x = pad_l + i * step
        y = float(pad_t + plot_h)
        for key in TOKEN_KEYS:
            n = (turn.tokens or {}).get(key, 0)
            if n <= 0:
                continue
            h = plot_h * n / top
            y -= h
            parts.append(
                f'<rect class="tok" data-seq="{turn.seq}" data-key="{key}" data-tokens="{n}" x="{x:.1f}" '
                f'y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{_TOKEN_COLOURS[key]}">'
                f"<title>seq {turn.seq}: {key} {n:,} tokens</title></rect>"
            )
        if turn.tokens is None:
            parts.append(
                f'<text x="{x:.1f}" y="{pad_t + plot_h - 2}" class="axis">?</text>'
            )
        cost = turn.cost_usd_micros
        if cost is not None:
            cy = pad_t + plot_h - plot_h * cost / top_cost
            parts.append(
                f'<circle class="cost" data-seq="{turn.seq}" data-usd-micros="{cost}" cx="{x + bar_w / 2:.1f}" '
                f'cy="{cy:.1f}" r="3"><title>seq {turn.seq}: ${cost / 1e6:.6f} ({total:,} tokens)</title></circle>'
            )
    legend_x = pad_l
    for key in TOKEN_KEYS:
        parts.append(
            f'<rect x="{legend_x}" y="{height - 12}" width="10" height="10" fill="{_TOKEN_COLOURS[key]}"/>'
            f'<text x="{legend_x + 14}" y="{height - 3}" class="axis">{key}</text>'
        )
        legend_x += 100
    parts.append(f'<circle cx="{legend_x + 5}" cy="{height - 7}" r="3" class="cost"/>')
    parts.append(f'<text x="{legend_x + 14}" y="{height - 3}" class="axis">cost (right scale)</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def share_bar(
    name: str, shares: Mapping[str, int], keys: Sequence[str] | None = None, width: int = 900
) -> Markup:
    """One horizontal bar split into `shares` (key → bytes), with a legend: the window by
    region or by cause. Each part is a `rect` with `data-key` and `data-bytes`."""
    order = list(keys) if keys is not None else sorted(shares, key=lambda k: -shares[k])
    total = sum(max(shares.get(k, 0), 0) for k in order) or 1
    height = 34 + 18 * ((len(order) + 3) // 4)
    parts = [
        f'<svg class="chart share" data-chart="{escape(name)}" role="img" viewBox="0 0 {width} {height}" '
        f'width="100%" xmlns="http://www.w3.org/2000/svg" aria-label="{escape(name)}">'
    ]
    x = 0.0
    for i, key in enumerate(order):
        n = shares.get(key, 0)
        w = width * max(n, 0) / total
        label = escape(key)
        parts.append(
            f'<rect class="part" data-key="{label}" data-bytes="{n}" x="{x:.2f}" y="0" width="{w:.2f}" '
            f'height="22" fill="{colour(i)}"><title>{label}: {n:,} bytes</title></rect>'
        )
        x += w
    for i, key in enumerate(order):
        lx, ly = 10 + (i % 4) * (width // 4), 40 + 18 * (i // 4)
        parts.append(
            f'<rect x="{lx}" y="{ly - 10}" width="10" height="10" fill="{colour(i)}"/>'
            f'<text x="{lx + 14}" y="{ly}" class="axis">{escape(key)} {shares.get(key, 0):,} B</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
