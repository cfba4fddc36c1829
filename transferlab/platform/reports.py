"""Experiment reports: Markdown (renders on GitHub) plus one self-contained HTML file, with figures.

Usage::

    report = Report("Offline CQL vs BC")
    report.paragraph("Success rate on the held-out tasks, 5 seeds, 95% bootstrap intervals.")
    report.table([{"method": "bc", "success": 0.41}, {"method": "cql", "success": 0.52}])
    report.figure(plot_bars({"bc": ci_bc, "cql": ci_cql}, ylabel="success rate"), "success", "Success")
    report.write(Path("reports/cql-vs-bc"))
    # -> report.md, figures/success.png, report.html (the PNG inlined as base64)

Text given to :meth:`Report.heading`, :meth:`Report.paragraph` and :meth:`Report.bullets` is plain text:
it is shown literally (Markdown and HTML characters are escaped), except that `` `backtick spans` ``
become inline code. Table cells are plain text. Figures are built on :class:`matplotlib.figure.Figure`
without pyplot, so nothing needs a display; the same input gives byte-identical files.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from transferlab.platform.io import atomic_write_bytes, atomic_write_text
from transferlab.platform.stats import Interval

__all__ = [
    "Curve",
    "Report",
    "ReportPaths",
    "draw_curves",
    "figure_png",
    "format_cell",
    "plot_bars",
    "plot_curves",
]

MISSING = "—"
"""How a missing table cell (None, NaN, a key a row lacks) is shown."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
_LANG_RE = re.compile(r"^[A-Za-z0-9_+.#-]*$")
_CODE_SPAN_RE = re.compile(r"`([^`\n]+)`")

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; line-height: 1.5;
       color: #1f2328; margin: 0; }
main { max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
h1, h2, h3 { line-height: 1.25; }
h1, h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 90%; }
code { background: #eff1f3; padding: .1em .3em; border-radius: 4px; }
pre { background: #f6f8fa; padding: 1em; overflow: auto; border-radius: 6px; }
pre code { background: none; padding: 0; }
table { border-collapse: collapse; margin: 1em 0; }
caption { caption-side: bottom; color: #59636e; font-style: italic; padding-top: .4em; text-align: left; }
th, td { border: 1px solid #d0d7de; padding: .3em .7em; vertical-align: top; }
th { background: #f6f8fa; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; }
figcaption { color: #59636e; font-style: italic; }
""".strip()


# --------------------------------------------------------------------------------------- escaping


def _escape_inline(text: str) -> str:
    """Plain text -> Markdown shown literally inside a line (no emphasis, links, code, HTML, pipes)."""
    text = re.sub(r"([\\`*\[\]<>|~])", r"\\\1", text)
    text = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)  # intraword _ is literal already
    return re.sub(r"&(?=#?[A-Za-z0-9]+;)", r"\\&", text)  # "&lt;" would become "<"


def _escape_md(text: str) -> str:
    """Plain text -> Markdown that GitHub shows literally, also at line starts (headings, lists, rules)."""
    text = _escape_inline(text)
    text = re.sub(r"(?m)^(\s*)(#{1,6})(?=\s|$)", r"\1\\\2", text)  # a heading
    text = re.sub(r"(?m)^(\s*)([-+=])(?=\s|[-=]*\s*$)", r"\1\\\2", text)  # a list item, rule, underline
    return re.sub(r"(?m)^(\s*\d{1,9})([.)])(?=\s|$)", r"\1\\\2", text)  # an ordered list item


def _inline(text: str, *, markdown: bool) -> str:
    """Plain text with `code spans` as Markdown or as HTML."""
    out: list[str] = []
    pos = 0
    for match in _CODE_SPAN_RE.finditer(text):
        plain = text[pos : match.start()]
        code = match.group(1)
        if markdown:
            out.append(_escape_md(plain) + f"`{code}`")
        else:
            out.append(html.escape(plain) + f"<code>{html.escape(code)}</code>")
        pos = match.end()
    rest = text[pos:]
    out.append(_escape_md(rest) if markdown else html.escape(rest))
    return "".join(out)


def _cell_md(text: str) -> str:
    return _escape_inline(text).replace("\r\n", "\n").replace("\n", "<br>")


def _cell_html(text: str) -> str:
    return html.escape(text).replace("\r\n", "\n").replace("\n", "<br>")


# ----------------------------------------------------------------------------------------- tables


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float | np.floating) and math.isnan(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def format_cell(value: Any, floatfmt: str = ".3f") -> str:
    """A table cell as text: floats with ``floatfmt``, Intervals as ``est [low, high]``, missing as —."""
    if _is_missing(value):
        return MISSING
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return format(float(value), floatfmt)
    if isinstance(value, Interval):
        return value.format(floatfmt)
    return str(value)


@dataclass(frozen=True)
class _Table:
    columns: list[str]
    cells: list[list[str]]
    numeric: list[bool]
    caption: str | None


def _make_table(
    rows: Sequence[Mapping[str, Any]] | pd.DataFrame, floatfmt: str, caption: str | None
) -> _Table:
    if isinstance(rows, pd.DataFrame):
        frame = (
            rows if isinstance(rows.index, pd.RangeIndex) and rows.index.name is None else rows.reset_index()
        )
        columns = [str(c) for c in frame.columns]
        records: list[list[Any]] = [list(r) for r in frame.itertuples(index=False, name=None)]
    else:
        columns = list(dict.fromkeys(str(k) for row in rows for k in row))
        records = [[row.get(c) for c in columns] for row in ({str(k): v for k, v in r.items()} for r in rows)]
    if not columns:
        raise ValueError("table has no columns: pass at least one row (mapping) or a DataFrame with columns")
    format(0.5, floatfmt)  # a bad format spec fails here, with the spec in the message
    cells = [[format_cell(v, floatfmt) for v in record] for record in records]
    numeric = [
        any(_is_number(r[i]) for r in records) and all(_is_number(r[i]) or _is_missing(r[i]) for r in records)
        for i in range(len(columns))
    ]
    return _Table(columns, cells, numeric, caption)


def _table_md(t: _Table) -> str:
    lines = [
        "| " + " | ".join(_cell_md(c) for c in t.columns) + " |",
        "| " + " | ".join("---:" if num else "---" for num in t.numeric) + " |",
        *("| " + " | ".join(_cell_md(c) for c in row) + " |" for row in t.cells),
    ]
    if t.caption:
        lines += ["", f"*{_inline(' '.join(t.caption.split()), markdown=True)}*"]
    return "\n".join(lines)


def _table_html(t: _Table) -> str:
    def row(tag: str, cells: Sequence[str]) -> str:
        tds = (
            f'<{tag} class="num">{_cell_html(c)}</{tag}>' if num else f"<{tag}>{_cell_html(c)}</{tag}>"
            for c, num in zip(cells, t.numeric, strict=True)
        )
        return "<tr>" + "".join(tds) + "</tr>"

    parts = ["<table>"]
    if t.caption:
        parts.append(f"<caption>{_inline(t.caption, markdown=False)}</caption>")
    parts += ["<thead>", row("th", t.columns), "</thead>", "<tbody>", *(row("td", r) for r in t.cells)]
    parts += ["</tbody>", "</table>"]
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class _Heading:
    text: str
    level: int


@dataclass(frozen=True)
class _Paragraph:
    text: str


@dataclass(frozen=True)
class _Bullets:
    items: list[str]


@dataclass(frozen=True)
class _Figure:
    name: str
    caption: str
    png: bytes


@dataclass(frozen=True)
class _Code:
    text: str
    lang: str


_Block = _Heading | _Paragraph | _Bullets | _Table | _Figure | _Code


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def _block_md(block: _Block) -> str:
    match block:
        case _Heading(text, level):
            return "#" * level + " " + _inline(" ".join(text.split()), markdown=True)
        case _Paragraph(text):
            return "\n\n".join(_inline(p, markdown=True) for p in _paragraphs(text))
        case _Bullets(items):
            return "\n".join(
                "- " + _inline(item.strip(), markdown=True).replace("\n", "\n  ") for item in items
            )
        case _Table():
            return _table_md(block)
        case _Figure(name, caption, _):
            image = f"![{_escape_inline(' '.join((caption or name).split()))}](figures/{name}.png)"
            return image + (
                f"\n\n*{_inline(' '.join(caption.split()), markdown=True)}*" if caption.strip() else ""
            )
        case _Code(text, lang):
            longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
            fence = "`" * max(3, longest + 1)
            return f"{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}"
    raise TypeError(f"unknown report block {block!r}")


def _block_html(block: _Block) -> str:
    match block:
        case _Heading(text, level):
            return f"<h{level}>{_inline(' '.join(text.split()), markdown=False)}</h{level}>"
        case _Paragraph(text):
            return "\n".join(f"<p>{_inline(p, markdown=False)}</p>" for p in _paragraphs(text))
        case _Bullets(items):
            lis = "".join(f"<li>{_inline(item.strip(), markdown=False)}</li>" for item in items)
            return f"<ul>{lis}</ul>"
        case _Table():
            return _table_html(block)
        case _Figure(name, caption, png):
            data = base64.b64encode(png).decode("ascii")
            img = f'<img alt="{html.escape(caption or name)}" src="data:image/png;base64,{data}">'
            cap = f"<figcaption>{_inline(caption, markdown=False)}</figcaption>" if caption.strip() else ""
            return f'<figure id="fig-{name}">{img}{cap}</figure>'
        case _Code(text, lang):
            cls = f' class="language-{lang}"' if lang else ""
            return f"<pre><code{cls}>{html.escape(text.rstrip(chr(10)))}</code></pre>"
    raise TypeError(f"unknown report block {block!r}")


# ----------------------------------------------------------------------------------------- report


def figure_png(fig: Figure, *, dpi: int = 100) -> bytes:
    """``fig`` as PNG bytes without a timestamp or software tag, so equal figures give equal bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def _close(fig: Figure) -> None:
    """Release a figure pyplot may be tracking (without importing pyplot if nobody did)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(fig)


@dataclass(frozen=True)
class ReportPaths:
    """Where :meth:`Report.write` put the report."""

    directory: Path
    markdown: Path
    html: Path
    figures: tuple[Path, ...]


class Report:
    """Builds a report block by block; :meth:`write` renders it as Markdown and as HTML.

    Every adding method returns the report, so calls can be chained.
    """

    def __init__(self, title: str) -> None:
        if not title.strip():
            raise ValueError("a report needs a non-empty title")
        self.title = " ".join(title.split())
        self._blocks: list[_Block] = []

    def heading(self, text: str, level: int = 2) -> Self:
        """A section heading; ``level`` 2..6 (level 1 is the title)."""
        if level not in range(2, 7):
            raise ValueError(f"heading level must be 2..6 (1 is the report title), got {level}")
        self._blocks.append(_Heading(text, level))
        return self

    def paragraph(self, text: str) -> Self:
        """A paragraph of plain text (blank lines start new paragraphs)."""
        self._blocks.append(_Paragraph(text))
        return self

    def bullets(self, items: Iterable[str]) -> Self:
        """A bulleted list, one plain-text item each."""
        self._blocks.append(_Bullets([str(item) for item in items]))
        return self

    def table(
        self,
        rows: Sequence[Mapping[str, Any]] | pd.DataFrame,
        *,
        floatfmt: str = ".3f",
        caption: str | None = None,
    ) -> Self:
        """A table from row mappings (columns in first-seen key order) or a DataFrame.

        A DataFrame's index becomes the first column(s) unless it is the default 0..n-1. Floats are
        formatted with ``floatfmt``, :class:`Interval` cells as ``est [low, high]``, missing cells as
        ``—``; columns holding only numbers are right-aligned.
        """
        self._blocks.append(_make_table(rows, floatfmt, caption))
        return self

    def figure(self, fig: Figure, name: str, caption: str = "", *, dpi: int = 100) -> Self:
        """Render ``fig`` to PNG now (saved as ``figures/<name>.png``) and close it."""
        name = name.removesuffix(".png")
        if not _NAME_RE.fullmatch(name):
            raise ValueError(
                f"invalid figure name {name!r}: use letters, digits, '_', '.' and '-', e.g. 'success_rate'"
            )
        if any(isinstance(b, _Figure) and b.name == name for b in self._blocks):
            raise ValueError(f"this report already has a figure named {name!r}; pick another name")
        try:
            png = figure_png(fig, dpi=dpi)
        finally:
            _close(fig)
        self._blocks.append(_Figure(name, caption, png))
        return self

    def code(self, text: str, lang: str = "") -> Self:
        """A code block (``lang`` e.g. ``"python"``, ``"json"``; empty for none)."""
        if not _LANG_RE.fullmatch(lang):
            raise ValueError(f"invalid code language {lang!r}: use a name like 'python' or 'json'")
        self._blocks.append(_Code(text, lang))
        return self

    def to_markdown(self) -> str:
        """The report as GitHub-flavoured Markdown (figures linked as ``figures/<name>.png``)."""
        parts = [f"# {_inline(self.title, markdown=True)}", *(_block_md(b) for b in self._blocks)]
        return "\n\n".join(parts) + "\n"

    def to_html(self) -> str:
        """The report as one self-contained HTML page (figures inlined as base64 PNG)."""
        body = "\n".join(_block_html(b) for b in self._blocks)
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(self.title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n<main>\n"
            f"<h1>{_inline(self.title, markdown=False)}</h1>\n{body}\n</main>\n</body>\n</html>\n"
        )

    def write(self, directory: str | os.PathLike[str]) -> ReportPaths:
        """Atomically write ``report.md``, ``figures/<name>.png`` and ``report.html`` into ``directory``.

        Other files already in ``directory`` (e.g. figures of an older version) are left alone.
        """
        out = Path(directory)
        figures = tuple(
            atomic_write_bytes(out / "figures" / f"{b.name}.png", b.png)
            for b in self._blocks
            if isinstance(b, _Figure)
        )
        markdown = atomic_write_text(out / "report.md", self.to_markdown())
        html_path = atomic_write_text(out / "report.html", self.to_html())
        return ReportPaths(out, markdown, html_path, figures)


# ---------------------------------------------------------------------------------------- figures

_Array = Sequence[float] | npt.NDArray[np.floating] | npt.NDArray[np.integer]


@dataclass(frozen=True, eq=False)
class Curve:
    """One line: ``y`` against ``x``, with an optional shaded band from ``low`` to ``high``."""

    x: _Array
    y: _Array
    low: _Array | None = None
    high: _Array | None = None
    color: str | None = None
    """A matplotlib colour (e.g. ``"C2"``) to keep a series' colour fixed across panels."""


def _curve_arrays(label: str, curve: Curve) -> tuple[npt.NDArray[np.float64], ...]:
    arrays = [
        np.asarray(a, dtype=np.float64) for a in (curve.x, curve.y, curve.low, curve.high) if a is not None
    ]
    if (curve.low is None) != (curve.high is None):
        raise ValueError(f"curve {label!r}: give both low and high for a shaded interval, or neither")
    if any(a.ndim != 1 or a.shape != arrays[0].shape for a in arrays):
        shapes = [a.shape for a in arrays]
        raise ValueError(f"curve {label!r}: x, y (and low, high) must be 1-D of equal length, got {shapes}")
    return tuple(arrays)


def draw_curves(
    ax: Axes,
    series: Mapping[str, Curve],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    legend: bool = True,
) -> Axes:
    """Draw each curve on ``ax`` (a line, plus a band when it has ``low``/``high``), labelled by key."""
    for label, curve in series.items():
        x, y, *band = _curve_arrays(label, curve)
        marker = "o" if x.size == 1 else None  # a lone point would not show as a line
        (line,) = ax.plot(x, y, label=label, linewidth=1.6, color=curve.color, marker=marker)
        if band:
            ax.fill_between(x, band[0], band[1], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if series and legend:
        ax.legend(frameon=False)
    return ax


def plot_curves(
    series: Mapping[str, Curve],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    figsize: tuple[float, float] = (6.4, 4.0),
) -> Figure:
    """A figure with every curve overlaid on one axes (see :func:`draw_curves`)."""
    fig = Figure(figsize=figsize, layout="constrained")
    draw_curves(fig.add_subplot(), series, xlabel=xlabel, ylabel=ylabel, title=title)
    return fig


def plot_bars(
    groups: Mapping[str, Interval],
    *,
    ylabel: str,
    title: str | None = None,
    figsize: tuple[float, float] = (6.4, 4.0),
) -> Figure:
    """One bar per group at its estimate, with an error bar from ``low`` to ``high``."""
    labels = list(groups)
    estimates = np.asarray([groups[k].estimate for k in labels], dtype=np.float64)
    errors = np.asarray(
        [
            [max(0.0, g.estimate - g.low) for g in groups.values()],
            [max(0.0, g.high - g.estimate) for g in groups.values()],
        ],
        dtype=np.float64,
    ).reshape(2, len(labels))
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    colours = [f"C{i % 10}" for i in range(len(labels))]
    ax.bar(np.arange(len(labels)), estimates, yerr=errors, capsize=5, color=colours, alpha=0.85)
    long_labels = max(map(len, labels), default=0) > 10
    ax.set_xticks(np.arange(len(labels)), labels)
    if long_labels:
        ax.tick_params(axis="x", labelrotation=20)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
            tick.set_rotation_mode("anchor")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    levels = {g.level for g in groups.values()}
    if len(levels) == 1:
        ax.set_xlabel(f"error bars: {levels.pop():.0%} CI", fontsize="small", color="0.4")
    return fig
