"""The README quickstart's PyTorch steps run as written: its mymodel.py, graph info on it, the ONNX export line."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from cli_helpers import run

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
QUICKSTART = README[README.index("## Quickstart") : README.index("## Python API")]


def test_quickstart_pytorch_model_info_and_export(tmp_path: Path) -> None:
    model = re.search(r"^```python\n# mymodel.py\n(.*?)^```", QUICKSTART, flags=re.S | re.M)
    assert model is not None, "the quickstart lost its mymodel.py block"
    (tmp_path / "mymodel.py").write_text(model.group(1))
    bash = re.findall(r"^```bash\n(.*?)^```", QUICKSTART, flags=re.S | re.M)[0].replace("\\\n", "")
    lines = [ln.split("  #")[0].strip() for ln in bash.splitlines()]
    info = next(ln for ln in lines if ln.startswith("mlsysopt graph info ./mymodel.py:"))
    proc = run(*shlex.split(info)[1:], "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["tasks"] > 30 and summary["total_flops"] > 1e7  # 4 encoder blocks traced op by op
    export = next(ln for ln in lines if ln.startswith("python -c "))
    code = shlex.split(export)[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "tiny_vit.onnx"), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    for batch in (1, 4):  # the dynamic batch axis serving needs
        out = session.run(None, {name: np.zeros((batch, 3, 32, 32), dtype=np.float32)})[0]
        assert out.shape == (batch, 10)
