"""The one registry mechanism of placers, tuners and NAS searchers: lazy imports, one error naming the choices."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas.registry import METHODS as NAS_METHODS
from mlsysopt.placement.baselines import BASELINES
from mlsysopt.placement.methods import METHODS as PLACEMENT_METHODS
from mlsysopt.registry import Registry, lazy_attribute_map
from mlsysopt.serving.tuners import TUNERS


def test_an_entry_is_imported_on_first_look_up_and_an_unknown_name_lists_the_choices() -> None:
    reg: Registry[object] = Registry("widget", {"join": "os.path:join", "two": 2})
    assert list(reg) == ["join", "two"] and len(reg) == 2 and "join" in reg and "nope" not in reg
    import os.path

    assert reg.load("join") is os.path.join and reg["two"] == 2
    assert reg.where("join") == "os.path:join" and reg.where("two") is None
    assert lazy_attribute_map(reg) == {"join": "os.path"}
    with pytest.raises(MlsysoptError, match=r"unknown widget 'nope' \(choose from: join, two\)"):
        reg.load("nope")


@pytest.mark.parametrize(
    ("registry", "family", "first"),
    [
        (TUNERS, "tuner", "rrl"),
        (NAS_METHODS, "NAS method", "epnas"),
        (PLACEMENT_METHODS, "method", "heft"),
        (BASELINES, "baseline", "heft"),
    ],
)
def test_every_family_registers_through_it(registry: Registry, family: str, first: str) -> None:
    assert isinstance(registry, Registry) and registry.family == family and next(iter(registry)) == first
    with pytest.raises(MlsysoptError, match=f"unknown {family} 'nope'"):
        registry.check("nope")


def test_naming_a_method_imports_no_optuna_and_no_torch() -> None:
    code = (
        "import sys\n"
        "from mlsysopt.serving.tuners import TUNERS\n"
        "from mlsysopt.nas.registry import METHODS, check_method\n"
        "TUNERS.check('tpe'); check_method('tpe')\n"
        "print(sorted(m for m in ('optuna', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
