"""The shipped service profiles, split once into *tuning* and *held-out* ones, and the shipped prior.

Profiles (``preset:NAME``, e.g. ``preset:mobilenet@32``):

* **measured** here (2 cores, ``benchmarks/serving_profiles.py``): the zoo's CNN, ResNet, MobileNet and
  transformer, a user's ``.py`` models (``benchmarks/serving_models.py``: two MLPs, a wide CNN, a small ViT, a
  wide-and-deep ranker) and a plain ONNX file (a GEMM stack written with ``onnx.helper``): timings tables, the
  fitted service model, the dispatch overhead and the model's FLOPs, parameters and input bytes;
* **extrapolated** to 8-64 cores from those (:meth:`ServiceProfile.scaled`: Amdahl's law beyond 2 threads, not a
  measurement);
* **synthetic**: four documented parameter sets (below), no measurement at all.

The split is by *model* (every core count of a model lies on the same side), fixed here once: defaults of RRL, of
the prior and of the warm-started baselines are chosen on the tuning profiles only; the benchmark's headline is on
the held-out ones, and it writes the split into its JSON. :func:`preset_prior` is the prior fitted on histories of
the tuning profiles only (``benchmarks/serving_profiles.py --prior`` rebuilds it); it lives in
:mod:`mlsysopt.serving.prior`. :func:`resolve_profile` reads any ``--profile``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.profile import ServiceProfile

SPLITS = ("tuning", "heldout")

#: model -> (split, source, the core counts it is shipped at). measured models are timed on 2 cores here.
MODELS: dict[str, tuple[str, str, tuple[int, ...]]] = {
    # tuning
    "cnn": ("tuning", "measured", (8, 32)),
    "resnet": ("tuning", "measured", (16, 64)),
    "mlp_small": ("tuning", "measured", (8, 32)),
    "gemm_stack": ("tuning", "measured", (16, 64)),
    "wide_deep": ("tuning", "measured", (8, 32)),
    "synthetic-cnn": ("tuning", "synthetic", (16, 64)),
    "synthetic-rnn": ("tuning", "synthetic", (8, 32)),
    # held out: one core count each (the benchmark runs every tuner x 10 seeds on each)
    "mobilenet": ("heldout", "measured", (16,)),
    "transformer": ("heldout", "measured", (32,)),
    "mlp_wide": ("heldout", "measured", (64,)),
    "cnn_wide": ("heldout", "measured", (8,)),
    "tiny_vit": ("heldout", "measured", (32,)),
    "synthetic-bert": ("heldout", "synthetic", (16,)),
    "synthetic-mlp": ("heldout", "synthetic", (64,)),
}

#: synthetic parameter sets: a_ms, c_ms, f_intra, f_inter, intra_ms, inter_ms, dispatch_ms (and what they mimic)
SYNTHETIC: dict[str, tuple[tuple[float, ...], str]] = {
    "synthetic-cnn": ((1.0, 0.6, 0.9, 0.3, 0.05, 0.1, 0.0), "a mid-size CNN (ServiceProfile.synthetic)"),
    "synthetic-rnn": ((0.3, 2.0, 0.4, 0.7, 0.02, 0.05, 0.0), "a recurrent model: little intra-op, much inter-op"),
    "synthetic-bert": ((3.0, 4.0, 0.95, 0.1, 0.08, 0.3, 0.0), "a BERT-base-like encoder: big, parallel kernels"),
    "synthetic-mlp": ((0.2, 0.03, 0.6, 0.0, 0.01, 0.05, 0.05), "a tiny MLP: per-batch overhead dominates"),
}


@dataclass(frozen=True)
class Preset:
    """One shipped profile: a model at a core count, on one side of the split."""

    model: str
    cores: int
    split: str
    source: str  # measured | extrapolated | synthetic

    @property
    def name(self) -> str:
        """``MODEL@CORES``."""
        return f"{self.model}@{self.cores}"

    def profile(self) -> ServiceProfile:
        """The service profile (loaded, and extrapolated to ``cores`` when measured on fewer)."""
        if self.source == "synthetic":
            (a, c, fi, fo, ti, to, disp), _ = SYNTHETIC[self.model]
            return ServiceProfile(a, c, fi, fo, ti, to, cores=self.cores, source="synthetic", model=self.model,
                                  dispatch_ms=disp)  # fmt: skip
        return measured_profile(self.model).scaled(self.cores)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready description (what the benchmark writes as its split)."""
        return {"name": self.name, "model": self.model, "cores": self.cores, "split": self.split, "source": self.source}


def presets(split: str | None = None) -> list[Preset]:
    """Every shipped profile (of one split), in catalogue order."""
    if split is not None and split not in SPLITS:
        raise InvalidSpace(f"unknown split '{split}' (choose from: {', '.join(SPLITS)})")
    out = []
    for model, (side, source, cores) in MODELS.items():
        if split is None or side == split:
            for n in cores:
                out.append(Preset(model, n, side, "synthetic" if source == "synthetic" else "extrapolated"))
    return out


def preset(name: str) -> Preset:
    """The preset ``MODEL@CORES`` (or ``MODEL`` at its first core count, or a measured ``MODEL@2`` as timed)."""
    model, _, cores_text = name.partition("@")
    if model not in MODELS:
        raise InvalidSpace(f"unknown preset profile '{name}' (models: {', '.join(MODELS)}; e.g. mobilenet@32)")
    side, source, cores = MODELS[model]
    try:
        n = int(cores_text) if cores_text else cores[0]
    except ValueError:
        raise InvalidSpace(f"preset profile '{name}': '{cores_text}' is not a core count") from None
    if not 1 <= n <= 4096:
        raise InvalidSpace(f"preset profile '{name}': the core count must be 1 to 4096")
    if source == "synthetic":
        return Preset(model, n, side, "synthetic")
    return Preset(model, n, side, "measured" if n == measured_profile(model).cores else "extrapolated")


@cache
def measured_profile(model: str) -> ServiceProfile:
    """The profile of ``model`` as measured here (shipped JSON)."""
    path = resources.files("mlsysopt.serving") / "profiles" / f"{model}.json"
    if not path.is_file():
        raise InvalidSpace(f"no measured profile shipped for '{model}' ({path} is missing)")
    return ServiceProfile.from_dict(__import__("json").loads(path.read_text()), where=str(path))


#: The profile a simulated job uses when none is given.
DEFAULT_PROFILE = "synthetic:32"


def resolve_profile(spec: str) -> ServiceProfile:
    """``synthetic`` / ``synthetic:CORES`` (documented parameters, no measurement), ``preset:MODEL@CORES`` (a shipped
    profile, :mod:`mlsysopt.serving.presets`) or a profile JSON file.

    Args:
        spec: ``synthetic``, ``synthetic:CORES`` (1 to 4096), ``preset:MODEL@CORES`` or a profile JSON path.

    Returns:
        ServiceProfile: The profile.

    Raises:
        InvalidSpace: For an empty spec, a bad core count, an unknown preset, or an unreadable or invalid file.
    """
    if not spec.strip():
        raise InvalidSpace(
            "--profile is empty: give a profile.json from 'serving profile', preset:MODEL@CORES or synthetic[:CORES]"
        )
    if spec.startswith("preset:"):
        return preset(spec.partition(":")[2]).profile()
    if spec == "synthetic" or spec.startswith("synthetic:"):
        cores_text = spec.partition(":")[2] or "32"
        try:
            cores = int(cores_text)
        except ValueError:
            raise InvalidSpace(f"--profile {spec}: '{cores_text}' is not a core count (e.g. synthetic:32)") from None
        if not 1 <= cores <= 4096:
            raise InvalidSpace(f"--profile {spec}: the core count must be 1 to 4096")
        return ServiceProfile.synthetic(cores=cores)
    return ServiceProfile.load(Path(spec))
