"""`serving profile --engine`: what is refused before anything starts (the Ray Serve calibration itself runs in
tests/serving/test_rayserve.py on the shared engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.jobs import ProfileJob


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"engine": "sim"}, "--engine sim: profile times a real model"),
        ({"address": "auto"}, "--address and --port belong to --engine rayserve"),
        ({"port": 8000}, "--address and --port belong to --engine rayserve"),
        ({"engine": "rayserve", "calibrate": False}, "drop --no-calibrate"),
        ({"engine": "rayserve", "address": "127.0.0.1:1"}, "--address 127.0.0.1:1: no Ray head answers"),
    ],
)
def test_a_bad_engine_option_is_one_line_and_leaves_no_run_folder(tmp_path: Path, options: dict, message: str) -> None:
    out = tmp_path / "prof"
    with pytest.raises(MlsysoptError, match=message):
        ProfileJob(out, rows=(1, 2, 4), intra=(1, 2), inter=(1,), **options)
    assert not out.exists()
