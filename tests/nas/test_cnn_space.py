"""CNN space: real training on digits, resources from the fx importer, determinism, workers, image folders."""

from __future__ import annotations

import math
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import InvalidArchitecture, InvalidDataset
from mlsysopt.nas.spaces import Arch, CnnSpace, get_space
from mlsysopt.nas.spaces.data import _digits_arrays, load_digits_split
from mlsysopt.runtime import LocalExecutor


@pytest.fixture(scope="module")
def digits() -> CnnSpace:
    return CnnSpace("digits")


def test_one_block_trains_clearly_above_chance(digits: CnnSpace) -> None:
    arch = digits.arch_from_names([("conv3x3", "identity", 16)])
    t0 = time.perf_counter()
    ev = digits.evaluate(arch)
    wall = time.perf_counter() - t0
    assert ev.ok and ev.error is None
    assert ev.perf > 0.5 and ev.test_perf is not None and ev.test_perf > 0.5  # chance is 0.1
    assert 0 < ev.cost_s <= wall  # ~1-2 s on one core (speed is the benchmark's, not a timed test's)
    assert set(ev.resources) == set(digits.resource_names) == {"params", "flops", "latency_ms", "intensity"}
    assert ev.extra["epochs"] == digits.epochs and math.isfinite(ev.extra["train_loss"])


def test_resources_are_positive_and_grow_with_blocks(digits: CnnSpace) -> None:
    rng = np.random.default_rng(0)
    for _ in range(3):
        arch = digits.sample(rng, 1)
        prev = digits.resources(arch)
        while arch.blocks < digits.max_blocks:
            arch = digits.extend(arch, rng)
            res = digits.resources(arch)
            assert all(math.isfinite(v) and v > 0 for v in res.values())
            assert res["params"] > prev["params"] and res["flops"] > prev["flops"]
            prev = res
    model = digits.build(arch)
    assert prev["params"] == sum(p.numel() for p in model.parameters())
    assert digits.resources(arch) is not digits.resources(arch)  # callers get copies of the cache
    big = digits.arch_from_names([("conv5x5", "conv5x5", 32)] * 4)
    small = digits.arch_from_names([("identity", "maxpool3x3", 8)])
    assert digits.resources(big)["intensity"] > digits.resources(small)["intensity"]


def test_closed_form_resources_equal_the_fx_importer(digits: CnnSpace, tmp_path: Path) -> None:
    """The fast path must give the importer's params, FLOPs and intensity exactly, for every op and width."""
    pairs = [(a, b) for a in digits.ops for b in digits.ops]  # every op pair, the widths taking turns
    archs = [digits.arch_from_names([(a, b, digits.widths[i % len(digits.widths)])]) for i, (a, b) in enumerate(pairs)]
    rng = np.random.default_rng(7)
    archs += [digits.sample(rng, b) for b in range(2, digits.max_blocks + 1) for _ in range(4)]
    for arch in archs:
        assert digits.resources_for(arch, ()) == digits.importer_resources(arch), digits.decode(arch)
    for size in (32, 33):  # RGB images with the stride-2 stem, even and odd sizes
        root = tmp_path / f"rgb{size}"
        for cls in ("a", "b"):
            _write_images(root / "train" / cls, 2, size=size)
            _write_images(root / "test" / cls, 1, size=size)
        space = get_space(f"cifar10:{root}")
        assert space.input_shape == (3, size, size)
        for arch in [space.sample(rng, b) for b in range(1, space.max_blocks + 1) for _ in range(2)]:
            assert space.resources_for(arch, ()) == space.importer_resources(arch), space.decode(arch)


def test_latency_is_measured_only_when_asked_and_once(monkeypatch: pytest.MonkeyPatch) -> None:
    space = CnnSpace("digits", latency_runs=2)
    timed: list[Arch] = []
    real = space._measure_latency
    monkeypatch.setattr(space, "_measure_latency", lambda a: timed.append(a) or real(a))
    arch = space.arch_from_names([("conv5x5", "sepconv3x3", 32), ("identity", "avgpool3x3", 8)])
    cheap = space.resources_for(arch, ("params", "flops"))
    assert set(cheap) == {"params", "flops", "intensity"} and timed == []
    assert space.costly_resources == ("latency_ms",)
    full = space.resources(arch)
    assert set(full) == set(space.resource_names) and full["latency_ms"] > 0 and timed == [arch]
    assert space.resources_for(arch, ("latency_ms",)) == full and timed == [arch]  # cached
    monkeypatch.undo()
    clone = pickle.loads(pickle.dumps(space))  # the measured latency travels to workers, the cheap cache does not
    assert clone._latency_cache == {arch: full["latency_ms"]} and clone._static_cache == {}
    assert clone.resources(arch) == full


def test_decisions_names_and_bad_archs(digits: CnnSpace) -> None:
    assert digits.decisions(1) == [6, 6, 3] and digits.decisions(2) == [6, 6, 3, 6, 6, 3]
    assert digits.decision_names(1) == ["b1.op_a", "b1.op_b", "b1.width"]
    arch = digits.arch_from_names([("sepconv3x3", "avgpool3x3", 32), ("conv5x5", "identity", 8)])
    assert digits.decode(arch)["blocks"][1] == {"op_a": "conv5x5", "op_b": "identity", "width": 8}
    with pytest.raises(InvalidArchitecture, match="unknown op 'conv7x7'.*sepconv3x3"):
        digits.arch_from_names([("conv7x7", "identity", 8)])
    with pytest.raises(InvalidArchitecture, match="width 12"):
        digits.arch_from_names([("conv3x3", "identity", 12)])
    with pytest.raises(InvalidArchitecture, match="has 3 decisions"):
        digits.evaluate(Arch((0, 0), 1))
    with pytest.raises(InvalidArchitecture, match="must be in 0..2"):
        digits.resources(Arch((0, 0, 3), 1))
    small = CnnSpace("digits", ops=["conv3x3", "identity"], widths=[4, 8], max_blocks=2)
    assert small.decisions(2) == [2, 2, 2, 2, 2, 2] and small.max_blocks == 2


def test_evaluate_is_deterministic_for_a_seed() -> None:
    space = CnnSpace("digits", epochs=2)
    arch = space.arch_from_names([("sepconv3x3", "maxpool3x3", 8)])
    a, b = space.evaluate(arch, seed=1), space.evaluate(arch, seed=1)
    assert (a.perf, a.test_perf, a.extra["train_loss"]) == (b.perf, b.test_perf, b.extra["train_loss"])


def test_nan_loss_is_a_failed_evaluation_not_an_exception() -> None:
    space = CnnSpace("digits", lr=1e20, epochs=1)
    ev = space.evaluate(space.arch_from_names([("conv3x3", "identity", 8)]))
    assert not ev.ok and math.isnan(ev.perf) and ev.test_perf is None
    assert "nan" in ev.error.lower() and ev.resources["params"] > 0


def test_space_pickles_and_evaluates_in_spawned_workers() -> None:
    space = CnnSpace("digits", epochs=1)
    archs = [space.arch_from_names([("conv3x3", "identity", 8)]), space.arch_from_names([("avgpool3x3", "conv3x3", 8)])]
    assert len(pickle.dumps(space)) < 10_000  # configuration only: each worker loads the data itself
    for a in archs:  # as a search does before evaluating: the measured resources travel with the space
        space.resources(a)
    with LocalExecutor(2) as ex:
        remote = ex.map(space.evaluate, archs)
    local = [space.evaluate(a) for a in archs]
    for r, lo in zip(remote, local, strict=True):
        assert r.ok and r.arch == lo.arch
        assert (r.perf, r.test_perf) == (lo.perf, lo.test_perf)  # same seed, same result in another process


def test_digits_split_is_the_bundled_data_stratified_and_disjoint() -> None:
    from sklearn.datasets import load_digits

    images, labels = _digits_arrays()
    ref = load_digits()
    assert np.array_equal(images, ref.images) and np.array_equal(labels, ref.target)
    split = load_digits_split(0)
    parts = [(split.x_train, split.y_train), (split.x_valid, split.y_valid), (split.x_test, split.y_test)]
    assert [len(y) for _, y in parts] == [1079, 359, 359] and split.input_shape == (1, 8, 8)
    for _, y in parts:  # stratified: every class near a tenth of every part
        assert np.bincount(y, minlength=10).min() > 0.8 * len(y) / 10
    all_labels = np.concatenate([y for _, y in parts])
    assert np.array_equal(np.bincount(all_labels), np.bincount(ref.target))  # a partition of the 1,797 images
    assert load_digits_split(0) is split and load_digits_split(1).y_valid.tolist() != split.y_valid.tolist()


# ---------------------------------------------------------------------- CIFAR-10 image folders
def _write_images(folder: Path, n: int, size: int = 32, seed: int = 0) -> None:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img{i}.png")


def _fake_cifar(root: Path, classes: tuple[str, ...] = ("cat", "dog")) -> Path:
    for k, cls in enumerate(classes):
        _write_images(root / "train" / cls, 4, seed=k)
        _write_images(root / "test" / cls, 2, seed=10 + k)
    return root


def test_cifar_folder_trains(tmp_path: Path) -> None:
    root = _fake_cifar(tmp_path / "cifar")
    space = get_space(f"cifar10:{root}", epochs=1, max_blocks=2)
    assert space.name == f"cifar10:{root}" and space.input_shape == (3, 32, 32) and space.n_classes == 2
    arch = space.sample(np.random.default_rng(0), 2)
    ev = space.evaluate(arch)
    assert ev.ok and 0 <= ev.perf <= 1 and 0 <= ev.test_perf <= 1
    assert ev.resources["flops"] > 0 and ev.resources["params"] > 0


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda r: None, "does not exist"),
        (lambda r: r.write_text("x"), "not a folder"),
        (lambda r: _write_images(r / "train" / "cat", 1), "no 'test' subfolder"),
        (lambda r: (_fake_cifar(r), _write_images(r / "train", 1)), "holds images directly"),
        (lambda r: (_write_images(r / "train" / "cat", 1), _write_images(r / "test" / "cat", 1)), "1 class folder"),
        (lambda r: (_fake_cifar(r), [p.unlink() for p in (r / "test" / "dog").iterdir()]), "hold no images"),
        (lambda r: (_fake_cifar(r), (r / "test" / "cat").rename(r / "test" / "bird")), "differ from test classes"),
    ],
)
def test_cifar_wrong_layout_is_one_clear_error(tmp_path: Path, make, problem: str) -> None:
    root = tmp_path / "data"
    make(root)
    with pytest.raises(InvalidDataset) as info:
        get_space(f"cifar10:{root}")
    msg = str(info.value)
    assert problem in msg and str(root) in msg and "train/<class>/*.png" in msg


def test_cifar_mixed_image_sizes(tmp_path: Path) -> None:
    root = _fake_cifar(tmp_path / "cifar")
    _write_images(tmp_path / "odd", 1, size=16)
    (tmp_path / "odd" / "img0.png").rename(root / "train" / "dog" / "odd.png")
    space = get_space(f"cifar10:{root}", epochs=1)
    with pytest.raises(InvalidDataset, match="different sizes"):
        space.evaluate(space.sample(np.random.default_rng(0), 1))
