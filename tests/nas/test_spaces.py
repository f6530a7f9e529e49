"""The SearchSpace interface on both spaces: prefix decisions, checking, sampling, encoding, get_space errors."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest

from mlsysopt.errors import InvalidArchitecture, InvalidDataset, InvalidSpace, MlsysoptError
from mlsysopt.nas.spaces import SPACE_SPECS, Arch, CnnSpace, Evaluation, NasBenchGraphSpace, SearchSpace, get_space


@pytest.fixture(scope="module", params=["nasbench-graph:cora", "nasbench-graph:proteins", "digits"])
def space(request: pytest.FixtureRequest) -> SearchSpace:
    return get_space(request.param)


def test_get_space_builds_each_kind() -> None:
    assert isinstance(get_space("nasbench-graph:citeseer"), NasBenchGraphSpace)
    cnn = get_space("digits", epochs=2, max_blocks=2)
    assert isinstance(cnn, CnnSpace) and cnn.epochs == 2 and cnn.max_blocks == 2
    assert "digits" in SPACE_SPECS and "nasbench-graph:cora" in SPACE_SPECS


@pytest.mark.parametrize(
    ("spec", "kw", "err", "words"),
    [
        ("nasbench-graph:coraa", {}, InvalidDataset, ["coraa", "cora, citeseer"]),
        ("nasbench-graph:", {}, InvalidDataset, ["choose from"]),
        ("imagenet", {}, InvalidSpace, ["imagenet", "nasbench-graph:cora", "digits", "cifar10:"]),
        ("cifar10:", {}, InvalidSpace, ["choose from"]),
        ("digits", {"ops": ["conv3x3", "conv7x7"]}, InvalidSpace, ["conv7x7", "sepconv3x3"]),
        ("digits", {"widths": []}, InvalidSpace, ["widths"]),
        ("digits", {"lr": float("nan")}, InvalidSpace, ["lr"]),
        ("nasbench-graph:cora", {"epochs": 3}, InvalidSpace, ["epochs"]),
    ],
)
def test_get_space_bad_input_is_one_clear_error(spec: str, kw: dict, err: type, words: list[str]) -> None:
    with pytest.raises(err) as info:
        get_space(spec, **kw)
    assert issubclass(err, MlsysoptError)
    for w in words:
        assert w in str(info.value)


def test_decisions_are_prefixes_and_named(space: SearchSpace) -> None:
    for b in range(space.min_blocks, space.max_blocks):
        small, big = space.decisions(b), space.decisions(b + 1)
        assert big[: len(small)] == small and len(big) > len(small)
        names = space.decision_names(b + 1)
        assert len(names) == len(big) == len(set(names))
        assert names[: len(small)] == space.decision_names(b)
    assert all(n >= 2 for n in space.decisions(space.max_blocks))
    with pytest.raises(InvalidArchitecture, match="blocks"):
        space.decisions(space.max_blocks + 1)
    with pytest.raises(InvalidArchitecture, match="blocks"):
        space.decisions(0)


def _cell(space: SearchSpace, arch: Arch) -> str:
    """What an architecture computes: NAS-Bench-Graph pads missing nodes with skip, so drop its block count."""
    desc = space.decode(arch)
    if isinstance(space, NasBenchGraphSpace):
        desc = {k: v for k, v in desc.items() if k not in ("blocks", "key")}
    return json.dumps(desc, sort_keys=True)


def test_sample_extend_and_encode(space: SearchSpace) -> None:
    rng = np.random.default_rng(0)
    length = space.encode_length()
    cells: dict[bytes, str] = {}
    for b in range(space.min_blocks, space.max_blocks + 1):
        for _ in range(10):
            arch = space.sample(rng, b)
            space.check(arch)
            assert arch.blocks == b and all(isinstance(c, int) for c in arch.choices)
            vec = space.encode(arch)
            assert vec.shape == (length,) and vec.dtype == np.float32
            assert set(np.unique(vec)) <= {0.0, 1.0}
            assert cells.setdefault(vec.tobytes(), _cell(space, arch)) == _cell(space, arch)
            if b < space.max_blocks:
                grown = space.extend(arch, rng)
                assert grown.blocks == b + 1 and grown.choices[: len(arch.choices)] == arch.choices
    assert len(cells) == len(set(cells.values())) > 20  # different archs encode differently
    full = space.sample(rng, space.max_blocks)
    assert full.blocks == space.max_blocks
    # no count asked: max_blocks, or a count drawn where the depth is a choice (the CNN space: tests/nas/test_depth.py)
    drawn = {space.sample(rng).blocks for _ in range(40)}
    assert drawn == (set(range(space.min_blocks, space.max_blocks + 1)) if space.depth_is_a_choice
                     else {space.max_blocks})  # fmt: skip
    with pytest.raises(InvalidArchitecture, match="max_blocks"):
        space.extend(full, rng)


def test_sampling_is_reproducible(space: SearchSpace) -> None:
    a = [space.sample(np.random.default_rng(7)) for _ in range(2)]
    assert a[0] == a[1]


def test_malformed_archs_raise_invalid_architecture(space: SearchSpace) -> None:
    good = space.sample(np.random.default_rng(1), 2)
    opts = space.decisions(2)
    bad = [
        Arch(good.choices[:-1], 2),  # one choice short
        Arch((*good.choices, 0), 2),  # one too many
        Arch((*good.choices[:-1], opts[-1]), 2),  # out of range
        Arch((-1, *good.choices[1:]), 2),  # negative
        Arch(good.choices, space.max_blocks + 1),  # too many blocks
        Arch(good.choices, 0),
        Arch((1.5, *good.choices[1:]), 2),  # not an integer
    ]
    for arch in bad:
        with pytest.raises(InvalidArchitecture):
            space.check(arch)
        with pytest.raises(InvalidArchitecture):
            space.encode(arch)
        assert not space.is_valid(arch)
    with pytest.raises(InvalidArchitecture, match="expected an Arch"):
        space.check((0, 1))  # type: ignore[arg-type]


def test_arch_and_evaluation_round_trip_json() -> None:
    arch = Arch(tuple(np.array([3, 1, 2])), 1)
    assert arch.choices == (3, 1, 2) and type(arch.choices[0]) is int
    assert hash(arch) == hash(Arch((3, 1, 2), 1))
    ev = Evaluation(arch, float("nan"), None, {"params": 10.0}, 0.5, ok=False, error="NaN loss")
    d = json.loads(json.dumps(ev.to_dict(), allow_nan=False))
    back = Evaluation.from_dict(d)
    assert back.arch == arch and math.isnan(back.perf) and back.error == "NaN loss" and not back.ok
    assert pickle.loads(pickle.dumps(arch)) == arch
