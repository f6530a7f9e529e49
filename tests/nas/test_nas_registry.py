"""Methods by name: lazy classes, config dataclasses filled and checked once, a config of the wrong method refused."""

from __future__ import annotations

import pytest
from test_methods import FakeSpace, constraints

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas import (
    EPNAS,
    METHOD_NAMES,
    PNAS,
    EPNASConfig,
    PNASConfig,
    SearcherConfig,
    TPEConfig,
    get_method,
    method_class,
    method_config,
)


def test_every_method_has_its_own_config_dataclass() -> None:
    configs = {name: method_class(name).Config for name in METHOD_NAMES}
    assert configs["epnas"] is EPNASConfig and configs["pnas"] is PNASConfig and configs["tpe"] is TPEConfig
    assert all(issubclass(c, SearcherConfig) for c in configs.values())
    assert len({method_class(name).name for name in METHOD_NAMES}) == len(METHOD_NAMES) == 11


def test_method_config_fills_and_checks_the_options() -> None:
    cfg = method_config("epnas", warmup=4, ucb=1, stage_split="equal")
    assert isinstance(cfg, EPNASConfig) and (cfg.warmup, cfg.ucb, cfg.stage_split) == (4, 1, "equal")
    assert cfg.candidates == EPNASConfig().candidates  # the rest stays at the defaults
    with pytest.raises(MlsysoptError, match="knob warmup of method 'epnas' must be of type int, got '4'"):
        method_config("epnas", warmup="4")
    with pytest.raises(MlsysoptError, match="knob multivariate of method 'tpe' must be of type bool"):
        method_config("tpe", multivariate=1)
    with pytest.raises(MlsysoptError, match="knob candidates of method 'epnas' must be of type int, got True"):
        method_config("epnas", candidates=True)
    with pytest.raises(MlsysoptError, match=r"unknown knob\(s\) for method 'random': beam \(known: tries\)"):
        method_config("random", beam=3)


def test_the_searcher_gets_exactly_the_built_config() -> None:
    s = get_method("pnas", FakeSpace(), constraints(), budget=5, seed=1, beam=2)
    assert isinstance(s, PNAS) and s.cfg == PNASConfig(beam=2) and s.budget == 5 and s.seed == 1
    assert EPNAS(FakeSpace(), constraints()).cfg == EPNASConfig()  # no config: the defaults
    with pytest.raises(MlsysoptError, match="method 'epnas' takes a EPNASConfig, not a PNASConfig"):
        EPNAS(FakeSpace(), constraints(), config=PNASConfig())  # type: ignore[arg-type]
    with pytest.raises(MlsysoptError, match="unknown stage_split 'fast'"):
        PNASConfig(stage_split="fast")


def test_a_knob_called_prior_reaches_the_method_beside_the_prior_object(tmp_path) -> None:
    from mlsysopt.nas.experiment import SearchOptions, prepare_search

    opts = SearchOptions(space="nasbench-graph:cora", method="epnas", budget=2, seed=0, knobs={"prior": "none"})
    job = prepare_search(tmp_path / "run", opts)
    assert job.searcher.cfg.prior == "none" and job.searcher.resolve_prior(job.searcher.cfg.prior) is None
