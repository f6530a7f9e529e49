"""Shared tick helpers: whole-number epoch/evaluation ticks, compact large-number labels, plain log labels."""

from __future__ import annotations

from typing import Any

from mlsysopt.report.figures import compact_ticks, integer_ticks, new_figure, plain_log_ticks


def labels(axis: Any) -> list[str]:
    axis.axes.figure.canvas.draw()
    return [t.get_text() for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]


def test_integer_ticks_never_give_half_epochs() -> None:
    ax = new_figure(5.5, 4).add_subplot()
    ax.plot([1, 2, 3], [0.1, 0.09, 0.08])
    before = ax.get_xticks()
    assert any(t != int(t) for t in before)  # matplotlib's default puts ticks at 1.5, 2.5, ...
    integer_ticks(ax.xaxis)
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(t == int(t) for t in ticks)


def test_compact_ticks_keep_large_labels_short() -> None:
    ax = new_figure(4.6, 3.6).add_subplot()
    ax.plot([105_000, 470_000], [0.4, 0.9])
    compact_ticks(ax.xaxis)
    got = labels(ax.xaxis)
    assert 3 <= len(got) <= 7 and all(len(t) <= 5 for t in got), got  # "200k", not "200000"
    assert any(t.endswith("k") for t in got)


def test_plain_log_ticks_and_linear_axes_untouched() -> None:
    ax = new_figure(4, 3).add_subplot()
    ax.plot([1, 2], [4.0, 70.0])
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    got = labels(ax.yaxis) + [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()]
    assert "10" in got and not any("times" in t or "^" in t or "e+" in t for t in got), got
    lin = new_figure(4, 3).add_subplot()
    lin.plot([0, 1], [0, 1])
    formatter = lin.yaxis.get_major_formatter()
    plain_log_ticks(lin.yaxis)
    assert lin.yaxis.get_major_formatter() is formatter
