"""write_index: a self-contained static page with escaped text, tables and embedded (data URI) images."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.report import html as html_mod
from mlsysopt.report.html import Section, data_uri, fmt_value, write_index

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def test_index_with_kv_table_rows_and_images(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(PNG)
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
    uri = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert html.count(f'<img src="{uri}"') == 2  # embedded: index.html alone is complete
    assert html.count('data-file="a.png"') == 2  # absolute path inside the run dir made relative
    assert 'src="a.png"' not in html and "loading=" not in html
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
    assert fmt_value(12668.849) == "12,669"
    assert fmt_value(3265.9049) == "3266"
    assert fmt_value(float("nan")) == "nan"
    assert fmt_value(True) == "yes" and fmt_value(False) == "no"
    assert fmt_value(np.bool_(True)) == "yes" and fmt_value(np.False_) == "no"
    assert fmt_value(None) == ""
    assert fmt_value("x") == "x"


def test_booleans_in_cells_and_footer(tmp_path: Path) -> None:
    sec = Section("s", table=[["default", True], ["best", np.False_]], columns=["configuration", "saturated"])
    html = write_index(tmp_path, "t", [sec], footer={"mlsysopt": "0.1.0", "total (s)": 1.5}).read_text()
    assert "<td>yes</td>" in html and "<td>no</td>" in html
    assert "True" not in html and "False" not in html
    assert "<footer><table>" in html and "<th>mlsysopt</th><td>0.1.0</td>" in html
    assert '<th>total (s)</th><td class="num">1.5</td>' in html


def test_data_uri_types_and_size_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    assert data_uri(tmp_path / "a.svg").startswith("data:image/svg+xml;base64,")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(MlsysoptError, match="unsupported type '.txt'"):
        data_uri(tmp_path / "a.txt")
    (tmp_path / "big.png").write_bytes(PNG)
    monkeypatch.setattr(html_mod, "MAX_IMAGE_BYTES", 10)
    with pytest.raises(MlsysoptError, match="big.png is 48 bytes, above the 10-byte limit"):
        write_index(tmp_path, "t", [Section("s", images=["big.png"])])
    assert not (tmp_path / "index.html").exists()
