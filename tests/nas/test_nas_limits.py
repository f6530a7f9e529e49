"""Every method knob has a type and a range, checked on creation; every size a search takes is bounded by limits
derived from memory and time before anything is allocated, and the refusal says the limit."""

from __future__ import annotations

import math

import pytest
from test_methods import FakeSpace

from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.nas import METHOD_NAMES, SearchOptions, get_method, get_space, method_class, method_config
from mlsysopt.nas.knobs import knob_fields
from mlsysopt.nas.limits import BYTES_PER_EVALUATION, MEMORY_SHARE, check_search_size, max_budget, training_cost
from mlsysopt.nas.registry import parse_method_knobs

GIB = 2**30
UNBOUNDED = {"penalty"}  # the one numeric knob of any finite value (an advantage, either sign)


def _wrong_types(want: type) -> list[object]:
    return {int: [1.5, True, "3"], float: ["x", math.nan, math.inf, False], bool: [1, "yes"], str: [3]}[want]


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_every_knob_out_of_range_or_of_the_wrong_type_is_refused(method: str) -> None:
    space = FakeSpace()
    for name, (want, f) in knob_fields(method_class(method).Config).items():
        meta = f.metadata
        if want in (int, float) and name not in UNBOUNDED:
            assert meta.get("lo") is not None, f"{method}: knob {name} has no lower bound"
        step = 1 if want is int else 1e-6
        outside = []
        if meta.get("lo") is not None:
            outside.append(meta["lo"] if meta["lo_open"] else meta["lo"] - step)
        if meta.get("hi") is not None:
            outside.append(meta["hi"] if meta["hi_open"] else meta["hi"] + step)
        for v in outside:
            with pytest.raises(InvalidOption, match=f"method '{method}': knob {name} is out of range: it needs {name}"):
                method_config(method, **{name: v})
        for v in _wrong_types(want):
            with pytest.raises(MlsysoptError, match=f"knob {name}"):
                method_config(method, **{name: v})
        if meta.get("choices"):
            with pytest.raises(MlsysoptError, match=f"unknown {name} 'nope'"):
                method_config(method, **{name: "nope"})
        method_config(method, **{name: f.default})  # the default itself is in range
    get_method(method, space)  # and so the method builds with every default


def test_the_knobs_an_earlier_review_found_unchecked_are_refused() -> None:
    with pytest.raises(InvalidOption, match="knob population is out of range: it needs population >= 1"):
        get_method("evolution", FakeSpace(), population=0)
    with pytest.raises(InvalidOption, match="knob tries is out of range: it needs tries >= 1"):
        get_method("evolution", FakeSpace(), tries=-1)
    with pytest.raises(InvalidOption, match="knob sample is out of range"):
        get_method("evolution", FakeSpace(), sample=0)
    with pytest.raises(InvalidOption, match="knob grow is out of range: it needs grow >= 0 and grow <= 1"):
        get_method("epnas", FakeSpace(), grow=1.5)


def test_knob_strings_are_typed_by_the_config() -> None:
    assert parse_method_knobs("epnas", ["round_size=4", "ucb=0.5", "stage_split=equal"]) == {
        "round_size": 4, "ucb": 0.5, "stage_split": "equal"}  # fmt: skip
    assert parse_method_knobs("tpe", ["multivariate=false"]) == {"multivariate": False}
    assert parse_method_knobs("random", []) == {}
    for items, match in (
        (["round_size=1.5"], "--knob round_size=1.5: expected an integer"),
        (["round_size=true"], "--knob round_size=true: expected an integer"),
        (["ucb=nan"], "--knob ucb=nan: expected a finite number"),
        (["multivariate=maybe"], "expected true or false"),
        (["warmup"], "expected NAME=VALUE"),
        (["population=3"], "method 'epnas' has no such knob"),
        (["warmup=1", "warmup=2"], "--knob warmup is given twice"),
        (["warmup=-1"], "knob warmup is out of range"),
    ):
        method = "tpe" if "multivariate" in items[0] else "epnas"
        with pytest.raises(InvalidOption, match=match):
            parse_method_knobs(method, items)


def test_the_budget_is_bounded_by_memory_and_by_the_table() -> None:
    proteins = get_space("nasbench-graph:proteins")
    assert max_budget(proteins, memory=64 * GIB) == (2021, "nasbench-graph:proteins has 2,021 distinct architectures")
    most, why = max_budget(proteins, memory=4 * 2**20)
    assert most == int(4 * 2**20 * MEMORY_SHARE // BYTES_PER_EVALUATION) == 512 and "of the 4 MiB available" in why
    with pytest.raises(InvalidOption, match=r"--budget 2,022 is more than the 2,021 evaluations allowed here"):
        check_search_size(proteins, SearchOptions(space="nasbench-graph:proteins", budget=2022), memory=64 * GIB)
    check_search_size(proteins, SearchOptions(space="nasbench-graph:proteins", budget=2021), memory=64 * GIB)


def test_workers_are_bounded_by_memory_per_process_or_per_ray_task() -> None:
    digits = get_space("digits")
    with pytest.raises(InvalidOption, match=r"--workers 3 is more than the 2 allowed here \(512 MiB per local worker"):
        check_search_size(digits, SearchOptions(space="digits", workers=3), memory=2 * GIB)
    check_search_size(digits, SearchOptions(space="digits", workers=3, backend="ray"), memory=2 * GIB)
    with pytest.raises(InvalidOption, match=r"allowed here \(1 MiB per Ray task in flight"):
        check_search_size(digits, SearchOptions(space="digits", workers=2000, backend="ray"), memory=2 * GIB)


def test_blocks_epochs_and_images_are_bounded_by_memory_and_time() -> None:
    big = get_space("digits", max_blocks=2000)
    cost = training_cost(big, 2000)
    assert cost["bytes"] > 10 * GIB  # weights, gradients, Adam state and activations of 2,000 blocks
    with pytest.raises(InvalidOption, match=r"--max-blocks 2000: training the largest candidate needs .* the limit "
                       r"here is --max-blocks [0-9,]+"):  # fmt: skip
        check_search_size(big, SearchOptions(space="digits", workers=2), memory=16 * GIB)
    slow = get_space("digits", epochs=10**7)
    with pytest.raises(
        InvalidOption,
        match=r"--epochs 10,000,000 with --max-blocks 4: .* takes at least [0-9,]+ "
        r"days, more than the 24 h one candidate may take; the limit at 4 block\(s\) is --epochs",
    ):
        check_search_size(slow, SearchOptions(space="digits"), memory=16 * GIB)
    with pytest.raises(InvalidOption, match=r"the images of digits need ~1 MiB in every process"):
        check_search_size(get_space("digits"), SearchOptions(space="digits"), memory=2**20)
    # a search that even at its smallest candidates outlasts 30 days needs --timeout
    long = get_space("digits", epochs=5000, max_blocks=1)
    opts = SearchOptions(space="digits", budget=2_000_000)
    with pytest.raises(InvalidOption, match=r"--budget 2,000,000: even at its smallest .* set --timeout SECONDS"):
        check_search_size(long, opts, memory=64 * GIB)
    opts.timeout = 3600.0
    check_search_size(long, opts, memory=64 * GIB)


def test_the_limits_default_to_this_machine() -> None:
    check_search_size(get_space("digits"), SearchOptions(space="digits", workers=2, budget=30))  # the README's run
    with pytest.raises(InvalidOption, match="--budget 1,000,000,000,000 is more than the"):
        check_search_size(get_space("digits"), SearchOptions(space="digits", budget=10**12))
