"""Report builder: files written, escaping, table formatting, figures inlined, byte-identical output."""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from transferlab.platform.reports import (
    Curve,
    Report,
    ReportPaths,
    figure_png,
    format_cell,
    plot_bars,
    plot_curves,
)
from transferlab.platform.stats import Interval

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _example_report() -> Report:
    x = np.arange(0, 50, 5)
    curves = {
        "bc": Curve(x, x / 50, low=x / 50 - 0.05, high=x / 50 + 0.05),
        "cql": Curve(x, np.sqrt(x / 50)),
    }
    bars = {"bc": Interval(0.4, 0.3, 0.5, 0.95, 100), "cql": Interval(0.6, 0.52, 0.7, 0.95, 100)}
    return (
        Report("CQL vs BC")
        .heading("Setup")
        .paragraph("Five seeds; `eval/success_rate` on held-out tasks.")
        .bullets(["offline data: 10k episodes", "95% bootstrap intervals"])
        .table(
            [
                {"method": "bc", "success": 0.41234, "episodes": 1000},
                {"method": "<script>alert('x')</script>", "success": 0.52, "episodes": 2000},
            ],
            caption="Final success rate",
        )
        .figure(plot_curves(curves, xlabel="episodes", ylabel="success rate"), "curves", "Learning curves")
        .figure(plot_bars(bars, ylabel="success rate"), "final", "Final success")
        .code('{"lr": 0.001}', lang="json")
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> ReportPaths:
    return _example_report().write(tmp_path_factory.mktemp("report") / "out")


def test_write_creates_the_markdown_the_html_and_the_figures(written: ReportPaths) -> None:
    paths, tmp_path = written, written.directory.parent
    assert paths.directory == tmp_path / "out"
    assert paths.markdown == tmp_path / "out" / "report.md"
    assert paths.html == tmp_path / "out" / "report.html"
    assert paths.figures == (
        tmp_path / "out" / "figures" / "curves.png",
        tmp_path / "out" / "figures" / "final.png",
    )
    for path in (paths.markdown, paths.html, *paths.figures):
        assert path.is_file() and path.stat().st_size > 0
    for png in paths.figures:
        assert png.read_bytes().startswith(PNG_MAGIC)
    assert not list((tmp_path / "out").rglob("*.tmp"))  # no atomic-write leftovers


def test_markdown_links_figures_that_exist(written: ReportPaths) -> None:
    paths = written
    text = paths.markdown.read_text(encoding="utf-8")
    links = re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", text)
    assert links == [("Learning curves", "figures/curves.png"), ("Final success", "figures/final.png")]
    for _, link in links:
        assert (paths.markdown.parent / link).is_file()
    assert text.startswith("# CQL vs BC\n\n## Setup\n\n")
    assert '```json\n{"lr": 0.001}\n```' in text


def test_html_inlines_each_png_as_base64(written: ReportPaths) -> None:
    paths = written
    page = paths.html.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    for png in paths.figures:
        assert f'src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"' in page
    assert "<figcaption>Learning curves</figcaption>" in page
    assert "<code>eval/success_rate</code>" in page
    assert "<style>" in page and "figures/" not in page  # self-contained: no links to files


def test_table_cells_are_escaped(written: ReportPaths) -> None:
    paths = written
    page = paths.html.read_text(encoding="utf-8")
    assert "<script>" not in page
    assert "<td>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</td>" in page
    text = paths.markdown.read_text(encoding="utf-8")
    assert "<script>" not in text
    assert r"| \<script\>alert('x')\</script\> |" in text


def test_table_float_formatting_and_alignment() -> None:
    rows: list[dict[str, Any]] = [
        {"name": "a", "x": 0.123456, "n": 3, "ci": Interval(0.5, 0.25, 0.75, 0.95, 4)},
        {"name": "b|c"},
    ]
    md = Report("t").table(rows).to_markdown()
    assert "| name | x | n | ci |\n| --- | ---: | ---: | --- |" in md  # number columns right-aligned
    assert r"| a | 0.123 | 3 | 0.500 \[0.250, 0.750\] |" in md
    assert r"| b\|c | — | — | — |" in md  # missing keys shown as a dash; pipes escaped
    pct = Report("t").table([{"rate": 0.4567}], floatfmt=".1%").to_markdown()
    assert "| 45.7% |" in pct


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.5, "0.500"),
        (np.float32(0.25), "0.250"),
        (3, "3"),
        (np.int64(7), "7"),
        (True, "True"),
        (None, "—"),
        (math.nan, "—"),
        (pd.NA, "—"),
        (math.inf, "inf"),
        ("x", "x"),
    ],
)
def test_format_cell(value: object, text: str) -> None:
    assert format_cell(value) == text


def test_dataframe_tables_keep_a_meaningful_index() -> None:
    wide = pd.DataFrame({"train/loss": [1.0, 0.5]}, index=pd.Index([0, 10], name="step"))
    md = Report("t").table(wide, floatfmt=".2f").to_markdown()
    assert "| step | train/loss |\n| ---: | ---: |\n| 0 | 1.00 |\n| 10 | 0.50 |" in md
    plain = Report("t").table(pd.DataFrame({"a": [1, 2]})).to_markdown()
    assert "| a |\n| ---: |\n| 1 |\n| 2 |" in plain  # the default 0..n-1 index is left out


def test_a_table_needs_columns() -> None:
    with pytest.raises(ValueError, match="no columns"):
        Report("t").table([])


def test_same_input_gives_identical_bytes(written: ReportPaths, tmp_path: Path) -> None:
    first = written
    second = _example_report().write(tmp_path / "again")
    for one, two in [
        (first.markdown, second.markdown),
        (first.html, second.html),
        *zip(first.figures, second.figures, strict=True),
    ]:
        assert one.read_bytes() == two.read_bytes(), one.name


def test_png_has_no_software_tag_or_timestamp() -> None:
    png = figure_png(plot_curves({"a": Curve([0, 1], [0, 1])}, xlabel="x", ylabel="y"))
    assert png.startswith(PNG_MAGIC)
    assert b"Software" not in png and b"tIME" not in png


def test_plain_text_is_shown_literally() -> None:
    report = Report("Notes").paragraph(
        "*not bold* and _not italic_ with pass_rate, a [link](x) and <b>\n# not a heading"
    )
    md = report.to_markdown()
    assert r"\*not bold\* and \_not italic\_ with pass_rate, a \[link\](x) and \<b\>" in md
    assert "\n\\# not a heading" in md
    page = report.to_html()
    assert (
        "<p>*not bold* and _not italic_ with pass_rate, a [link](x) and &lt;b&gt;\n# not a heading</p>"
        in page
    )


def test_code_fence_is_longer_than_any_backtick_run_in_the_code() -> None:
    md = Report("t").code("print('```')").to_markdown()
    assert "````\nprint('```')\n````" in md


def test_figure_is_closed_and_names_are_checked() -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    report = Report("t").figure(fig, "line.png")  # a .png suffix is dropped
    assert not plt.fignum_exists(fig.number)
    assert "figures/line.png" in report.to_markdown()
    with pytest.raises(ValueError, match="already has a figure named 'line'"):
        report.figure(plot_curves({}, xlabel="x", ylabel="y"), "line")
    with pytest.raises(ValueError, match="invalid figure name"):
        report.figure(plot_curves({}, xlabel="x", ylabel="y"), "../escape")


def test_plot_curves_draws_lines_and_bands() -> None:
    fig = plot_curves(
        {"a": Curve([0, 1, 2], [0, 1, 2], low=[0, 0.5, 1.5], high=[0, 1.5, 2.5]), "b": Curve([0, 2], [2, 0])},
        xlabel="step",
        ylabel="value",
        title="T",
    )
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    assert len(ax.collections) == 1  # one shaded band
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("step", "value", "T")


def test_curve_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="equal length"):
        plot_curves({"a": Curve([0, 1, 2], [0, 1])}, xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="both low and high"):
        plot_curves({"a": Curve([0, 1], [0, 1], low=[0, 0])}, xlabel="x", ylabel="y")


def test_plot_bars_heights_and_error_bars() -> None:
    fig = plot_bars(
        {"a": Interval(0.4, 0.3, 0.5, 0.95, 10), "b": Interval(0.6, 0.5, 0.9, 0.95, 10)}, ylabel="rate"
    )
    (ax,) = fig.axes
    assert [p.get_height() for p in ax.patches if isinstance(p, Rectangle)] == pytest.approx([0.4, 0.6])
    caps = np.sort(np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]))
    assert caps == pytest.approx([0.3, 0.5, 0.5, 0.9])  # the error bars' cap lines sit at low and high
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
