"""write_index: a self-contained static page with escaped text, tables and relative images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.report.html import Section, fmt_value, write_index


def test_index_with_kv_table_rows_and_images(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    sections = [
        Section("Graph <one>", "First paragraph & more.\n\nSecond.", table={"tasks": 12, "makespan": 0.012345}),
        Section(
            "Results",
            table=[["random", 1.5, 3], ["heft", np.float64(1.25), np.int64(2)]],
            columns=["method", "makespan", "devices"],
            images=["a.png", tmp_path / "a.png", "missing.png"],
            captions=["the gantt chart"],
        ),
    ]
    out = write_index(tmp_path, "Run & report", sections, subtitle="seed 0")
    assert out == tmp_path / "index.html"
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert "<title>Run &amp; report</title>" in html
    assert "Graph &lt;one&gt;" in html and "<one>" not in html
    assert html.count('<p class="text">') == 2
    assert '<th>tasks</th><td class="num">12</td>' in html
    assert "0.01235" in html and "1.25" in html
    assert "<th>method</th><th>makespan</th><th>devices</th>" in html
    assert html.count('src="a.png"') == 2  # absolute path inside the run dir made relative
    assert "missing.png was not written" in html
    assert "<figcaption>the gantt chart</figcaption>" in html
    assert 'href="#graph-one"' in html and 'id="results"' in html
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # atomic: no temp file


def test_row_length_mismatch_and_outside_image(tmp_path: Path) -> None:
    with pytest.raises(MlsysoptError, match="columns"):
        write_index(tmp_path, "t", [Section("s", table=[[1, 2, 3]], columns=["a", "b"])])
    with pytest.raises(MlsysoptError, match="outside the run directory"):
        write_index(tmp_path / "run", "t", [Section("s", images=[tmp_path / "x.png"])])
    assert not (tmp_path / "index.html").exists()


def test_fmt_value() -> None:
    assert fmt_value(1234567) == "1,234,567"
    assert fmt_value(np.int32(7)) == "7"
    assert fmt_value(0.000123456) == "0.0001235"
    assert fmt_value(2.5e9) == "2.500e+09"
    assert fmt_value(float("nan")) == "nan"
    assert fmt_value(True) == "True"
    assert fmt_value(None) == ""
    assert fmt_value("x") == "x"
