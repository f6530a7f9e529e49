"""``nas export``: the best CNN reloads from ONNX (ONNX Runtime, batch 1 and larger) and from the state dict (rebuilt
from the architecture JSON) with exactly the accuracy the search recorded; NAS-Bench-Graph gives its cell spec."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mlsysopt.errors import InvalidArchitecture, InvalidRunDir, MlsysoptError
from mlsysopt.models.cnn_cell import model_from_architecture
from mlsysopt.nas import SearchOptions, prepare_search
from mlsysopt.nas.export import load_exported_cnn, prepare_export
from mlsysopt.nas.spaces.data import load_digits_split

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished random search on digits (3 candidates of up to 2 blocks, 2 epochs each)."""
    out = tmp_path_factory.mktemp("nas") / "run"
    opts = SearchOptions(
        space="digits", method="random", budget=3, seed=1, space_options={"epochs": 2, "max_blocks": 2}
    )
    prepare_search(out, opts).run()
    return out


def _accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return int((logits.argmax(1) == y).sum()) / len(y)


def test_the_exported_cnn_reloads_in_onnx_runtime_and_pytorch_with_the_recorded_accuracy(
    digits_run: Path, tmp_path: Path
) -> None:
    import onnxruntime as ort

    record = prepare_export(digits_run, tmp_path / "x").run()
    result = json.loads((digits_run / "result.json").read_text())
    best = result["best"]
    assert record["best_index"] == best["index"] and record["search_finished"]
    assert record["reproduced"]["pytorch"] == {"perf": best["perf"], "test_perf": best["test_perf"]}
    out = tmp_path / "x"
    assert sorted(p.name for p in out.iterdir()) == [
        "architecture.json", "log.txt", "model.onnx", "model_state_dict.pt", "result.json",
        "settings.json"]  # fmt: skip
    arch = json.loads((out / "architecture.json").read_text())
    assert [(b["op_a"], b["op_b"], b["width"]) for b in arch["blocks"]] == [
        (b["op_a"], b["op_b"], b["width"]) for b in best["decoded"]["blocks"]]  # fmt: skip
    # preprocess raw digits (0..16) exactly as architecture.json says, without mlsysopt's split
    from sklearn.datasets import load_digits

    pre = arch["preprocessing"]
    raw = load_digits().images.astype(np.float32)[:, None]
    split = load_digits_split(0)
    x = ((raw * pre["scale"] - np.float32(pre["mean"][0])) / np.float32(pre["std"][0])).astype(np.float32)
    # the split's test images are rows of the raw set: find them and check the user's preprocessing gives the same
    test_rows = [int(np.argmin(np.abs(x.reshape(len(x), -1) - t.reshape(1, -1)).sum(1))) for t in split.x_test[:20]]
    assert np.allclose(x[test_rows], split.x_test[:20], atol=1e-5)
    # 1. plain PyTorch: the model rebuilt from the JSON, the state dict loaded weights-only and strictly
    model = model_from_architecture(arch)
    model.load_state_dict(torch.load(out / "model_state_dict.pt", weights_only=True), strict=True)
    model.eval()
    with torch.no_grad():
        valid = model(torch.from_numpy(split.x_valid)).numpy()
        test = model(torch.from_numpy(split.x_test)).numpy()
    assert _accuracy(valid, split.y_valid) == best["perf"] and _accuracy(test, split.y_test) == best["test_perf"]
    assert torch.equal(load_exported_cnn(out)(torch.from_numpy(split.x_test[:5])), torch.from_numpy(test[:5]))
    # 2. ONNX Runtime: a dynamic batch axis, batch 1 and several batch sizes, the same logits and accuracy
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    inp = session.get_inputs()[0]
    assert inp.name == "input_0" and isinstance(inp.shape[0], str) and inp.shape[1:] == arch["input_shape"]
    one = np.concatenate([session.run(None, {"input_0": split.x_test[i : i + 1]})[0] for i in range(10)])
    assert np.allclose(one, test[:10], atol=1e-4)
    for batch in (5, 64, len(split.x_test)):
        got = np.concatenate(
            [session.run(None, {"input_0": split.x_test[i : i + batch]})[0] for i in range(0, len(split.x_test), batch)]
        )
        assert got.shape == test.shape and np.allclose(got, test, atol=1e-4)
        assert _accuracy(got, split.y_test) == best["test_perf"]
    onnx_valid = session.run(None, {"input_0": split.x_valid})[0]
    assert _accuracy(onnx_valid, split.y_valid) == best["perf"]


def test_an_export_without_verification_writes_the_same_model(digits_run: Path, tmp_path: Path) -> None:
    prepare_export(digits_run, tmp_path / "a").run()
    record = prepare_export(digits_run, tmp_path / "b", verify=False).run()
    assert "reproduced" not in record and not record["verified"]
    a = torch.load(tmp_path / "a" / "model_state_dict.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / "model_state_dict.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpointed_search_exports_its_best_so_far(tmp_path: Path) -> None:
    """Resume twice: the kept weights follow the best evaluation across resumes (a timeout stops the first run)."""
    opts = SearchOptions(space="digits", method="random", budget=3, seed=2, timeout=0.0,
                         space_options={"epochs": 1, "max_blocks": 1})  # fmt: skip
    first = prepare_search(tmp_path / "r", opts).run()
    assert first.record["stopped_by"] == "timeout" and first.record["evaluated"] == 0
    with pytest.raises(MlsysoptError, match="nothing to export"):
        prepare_export(tmp_path / "r", tmp_path / "x0")
    assert not (tmp_path / "x0").exists()
    opts.timeout = None
    opts.budget = 2
    prepare_search(tmp_path / "r", opts, resume=True).run()
    (tmp_path / "r" / "result.json").unlink()  # as if the search were still running: only the checkpoint is there
    record = prepare_export(tmp_path / "r", tmp_path / "x").run()
    assert not record["search_finished"] and record["evaluated"] == 2
    opts.budget = 3
    done = prepare_search(tmp_path / "r", opts, resume=True).run()
    record = prepare_export(tmp_path / "r", tmp_path / "y").run()
    assert record["search_finished"] and record["best_index"] == done.record["best"]["index"]
    assert record["reproduced"]["pytorch"]["perf"] == done.record["best"]["perf"]


def test_a_nasbench_graph_cell_exports_its_spec_and_table_entry(tmp_path: Path) -> None:
    import nas_bench_graph

    # random search: the export does not depend on the method, and EPNAS would first train proteins' transfer prior
    options = SearchOptions(space="nasbench-graph:proteins", method="random", budget=6, seed=1)
    prepare_search(tmp_path / "g", options).run()
    result = json.loads((tmp_path / "g" / "result.json").read_text())
    record = prepare_export(tmp_path / "g", tmp_path / "x").run()
    arch = json.loads((tmp_path / "x" / "architecture.json").read_text())
    assert record["files"] == ["architecture.json", "result.json"]
    assert arch["link"] == result["best"]["decoded"]["link"] and arch["ops"] == result["best"]["decoded"]["ops"]
    assert arch["valid_hash"] == nas_bench_graph.Arch(arch["link"], arch["ops"]).valid_hash()
    entry = nas_bench_graph.light_read("proteins")[arch["valid_hash"]]
    assert arch["table_entry"]["valid_perf"] == entry["valid_perf"] == result["best"]["perf"]
    assert arch["table_entry"]["perf"] == entry["perf"] == result["best"]["test_perf"]
    assert set(arch["ops"]) <= {"gcn", "sage", "arma", "fc", "skip"}  # proteins' own op list


def test_bad_sources_are_refused_before_any_file(digits_run: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidRunDir, match="no such run folder"):
        prepare_export(tmp_path / "nope", tmp_path / "x")
    (tmp_path / "plain").mkdir()
    with pytest.raises(InvalidRunDir, match="has no settings.json: not a 'nas search' run folder"):
        prepare_export(tmp_path / "plain", tmp_path / "x")
    with pytest.raises(InvalidRunDir, match="the search's own folder"):
        prepare_export(digits_run, digits_run)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"format": "other/1"}, "'format' must be"),
        ({"input_shape": [1, 8]}, "'input_shape' must be"),
        ({"blocks": [{"op_a": "conv9x9", "op_b": "identity", "width": 8}]}, r"blocks\[0\].op_a must be one of"),
        ({"blocks": [{"op_a": "identity", "op_b": "identity", "width": 1.5}]}, r"blocks\[0\]: 'width' must be"),
        ({"n_classes": True}, "'n_classes' must be an integer"),
    ],
)
def test_a_bad_architecture_json_is_refused_naming_the_key(change: dict, match: str, tmp_path: Path) -> None:
    arch = {"format": "mlsysopt.nas.cnn/1", "input_shape": [1, 8, 8], "n_classes": 10, "stem_width": 16,
            "blocks": [{"op_a": "conv3x3", "op_b": "identity", "width": 8}], **change}  # fmt: skip
    path = tmp_path / "architecture.json"
    path.write_text(json.dumps(arch))
    with pytest.raises(InvalidArchitecture, match=match):
        model_from_architecture(path)
