"""A cell-based CNN space trained for real on digits (bundled with scikit-learn) or a CIFAR-10 image folder.

Network: stem (3x3 conv to ``stem_width`` channels, BN, ReLU; stride 2 when images are >= 32 px) -> ``b`` blocks
-> global average pool -> linear classifier. Block ``i`` has three decisions ``[op_a, op_b, width]``: both ops
read the block input (same channels, same size), their outputs are added, then a 1x1 conv + BN + ReLU maps to
``width`` channels. Ops: conv3x3, conv5x5 (conv + BN + ReLU), sepconv3x3 (depthwise 3x3 + pointwise 1x1 + BN + ReLU),
maxpool3x3, avgpool3x3 (stride 1), identity. Progression: ``b = 1..max_blocks`` blocks; block ``b + 1``'s three
decisions are appended, so ``decisions(b)`` is a prefix of ``decisions(b + 1)``; every block adds parameters
(at least its 1x1 conv).

Resources (batch 1): ``params`` and ``flops`` are sums over the nodes of the built model as the torch.fx importer
counts them; ``intensity`` = flops / bytes, bytes = sum of node ``bytes_in + bytes_out`` + ``params * 4`` (every
activation read and written once, float32 weights read once). The importer (:meth:`CnnSpace.importer_resources`) is
the reference; :meth:`CnnSpace.resources` gets the same three numbers in closed form
(:mod:`mlsysopt.nas.spaces.cnn_resources`: ~20-60 us instead of ~20-100 ms, tested equal to the importer),
because a search looks at thousands of candidates. ``latency_ms`` = median of ``latency_runs`` timed forward
passes with one torch thread on this CPU; it is the one costly resource (:attr:`CnnSpace.costly_resources`),
measured only when asked for (``resources``, or ``resources_for`` with ``latency_ms`` among the names, e.g. when a
latency constraint is active) and cached per architecture. The latency cache travels with the pickled space, so a
worker reports the latency the search filtered on; an architecture nobody measured has its latency measured by the
worker that trains it.

Training (:meth:`CnnSpace.evaluate`): ``epochs`` epochs (default 8) of Adam (lr 0.01, batch 64) from scratch with
one torch thread, seeded by ``seed``; perf = validation accuracy, test_perf = test accuracy. Digits: a stratified
60/20/20 train/valid/test split fixed by ``split_seed``; an image folder: 20% of each class of ``train/`` held out
for validation, ``test/`` for test. About 1-2 s per 1-block and 3-7 s per 3-block candidate on one core for digits.
A non-finite loss ends training with ``Evaluation(ok=False, perf=nan)`` instead of raising.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlsysopt.errors import InvalidArchitecture, InvalidDataset, InvalidSpace
from mlsysopt.models.cnn_cell import ARCHITECTURE_FORMAT, OPS, accuracy, build_model
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace
from mlsysopt.nas.spaces.cnn_resources import static_resources
from mlsysopt.nas.spaces.data import (
    DIGITS_IMAGES,
    DIGITS_TRAIN,
    Split,
    check_image_folder,
    image_folder_info,
    images_in,
    load_digits_split,
    load_image_folder_split,
)
from mlsysopt.runtime.threads import torch_threads

DIGITS_SHAPE = (1, 8, 8)


class _Adam:
    """Adam with torch's default betas and eps (torch.optim imports torch._dynamo: ~2-3 s in every spawned worker)."""

    def __init__(self, params: list[nn.Parameter], lr: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        self.params, self.lr, self.betas, self.eps, self.t = params, lr, betas, 1e-8, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    def zero_grad(self) -> None:
        """Drop the gradients."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One bias-corrected Adam update of every parameter that has a gradient."""
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-self.lr / c1)


#: The CNN-space options the command line sets, by flag.
FLAGS = {"max_blocks": "--max-blocks", "epochs": "--epochs", "lr": "--lr", "ops": "--ops"}


def _positive_int(name: str, v: Any, lo: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise InvalidSpace(f"{FLAGS.get(name, name)} must be an integer >= {lo}, got {v!r}")


def _check_options(ops: Any, widths: Any, stem_width: Any, ints: dict[str, Any], lr: Any) -> None:
    """Each CNN-space option of the right type and range, named by its flag (``--epochs``) or keyword."""
    ops = list(ops) if isinstance(ops, list | tuple) else ops
    if not isinstance(ops, list) or not ops:
        raise InvalidSpace(f"--ops must name at least one op (choose from: {', '.join(OPS)})")
    unknown = [str(o)[:40] for o in ops if o not in OPS]
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise InvalidSpace(f"unknown op(s) {shown} for the CNN space (choose from: {', '.join(OPS)})")
    twice = sorted({o for o in ops if ops.count(o) > 1})
    if twice:
        raise InvalidSpace(f"--ops names {', '.join(twice)} more than once (each op once)")
    if not isinstance(widths, list | tuple) or not widths:
        raise InvalidSpace(f"widths must be a non-empty list of positive integers, got {widths!r}")
    for w in widths:
        _positive_int("widths", w)
    _positive_int("stem_width", stem_width)
    for name, v in ints.items():
        _positive_int(name, v, lo=0 if name == "split_seed" else 1)
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not 0 < lr < math.inf:
        raise InvalidSpace(f"--lr must be a finite number > 0, got {lr!r}")


class CnnSpace(SearchSpace):
    """CNN cells trained for a few epochs: perf = valid accuracy, test_perf = test accuracy.

    Args:
        dataset: ``"digits"`` (scikit-learn's 8x8 digits) or ``"cifar10:/path/to/folder"`` (an image folder).
        max_blocks: Most blocks (cells) of an architecture, >= 1.
        ops: Candidate ops of each block's two branches (each at most once): ``conv3x3``, ``conv5x5``,
            ``sepconv3x3``, ``maxpool3x3``, ``avgpool3x3``, ``identity``.
        widths: Candidate output channel counts of a block, each >= 1.
        stem_width: Channels of the stem convolution, >= 1.
        epochs: Training epochs per evaluation, >= 1.
        batch_size: Training batch size, >= 1.
        lr: Learning rate, > 0.
        split_seed: Seed of the train/valid/test split, >= 0.
        threads: Torch threads for training, >= 1.
        latency_runs: Timed batch-1 forward passes per latency measurement (median kept), >= 1.
        max_per_class: Most images per class of an image folder (None: all).

    Raises:
        InvalidSpace: For unknown or repeated ops, bad widths or a non-positive option.
        InvalidDataset: For an unknown dataset or a malformed image folder.
    """

    min_blocks = 1
    depth_is_a_choice = True  # a CNN of 1 to max_blocks cells: every method draws the count (baselines included)
    resource_names = ("params", "flops", "latency_ms", "intensity")
    costly_resources = ("latency_ms",)
    block_names = ("b{i}.op_a", "b{i}.op_b", "b{i}.width")

    def __init__(
        self,
        dataset: str = "digits",
        *,
        max_blocks: int = 4,
        ops: tuple[str, ...] | list[str] = OPS,
        widths: tuple[int, ...] | list[int] = (8, 16, 32),
        stem_width: int = 16,
        epochs: int = 8,
        batch_size: int = 64,
        lr: float = 0.01,
        split_seed: int = 0,
        threads: int = 1,
        latency_runs: int = 20,
        max_per_class: int | None = None,
    ) -> None:
        _check_options(ops, widths, stem_width, dict(max_blocks=max_blocks, epochs=epochs, batch_size=batch_size,
                       threads=threads, latency_runs=latency_runs, split_seed=split_seed), lr)  # fmt: skip
        if max_per_class is not None:
            _positive_int("max_per_class", max_per_class)
        if dataset == "digits":
            self.root: str | None = None
            self.input_shape: tuple[int, int, int] = DIGITS_SHAPE
            self.n_classes = 10
        elif dataset.startswith("cifar10:") and dataset[len("cifar10:") :]:
            root = Path(dataset[len("cifar10:") :]).expanduser()
            self.root = str(root)
            classes, self.input_shape = image_folder_info(root)  # checks the layout now: a bad folder fails early
            self.n_classes = len(classes)
        else:
            raise InvalidDataset(f"unknown CNN dataset '{dataset}' (choose from: digits, cifar10:/path/to/folder)")
        self.name = dataset
        self.max_blocks = int(max_blocks)
        self.ops = tuple(ops)
        self.widths = tuple(int(w) for w in widths)
        self.block_options = (len(self.ops), len(self.ops), len(self.widths))
        self.stem_width, self.epochs, self.batch_size = int(stem_width), int(epochs), int(batch_size)
        self.lr = float(lr)
        self.split_seed, self.threads, self.latency_runs = int(split_seed), int(threads), int(latency_runs)
        self.max_per_class = max_per_class
        self._static_cache: dict[Arch, dict[str, float]] = {}
        self._latency_cache: dict[Arch, float] = {}

    # ------------------------------------------------------------------ names
    def spec(self, arch: Arch) -> list[tuple[str, str, int]]:
        """``[(op_a, op_b, width), ...]`` per block."""
        self.check(arch)
        c = arch.choices
        return [(self.ops[c[3 * i]], self.ops[c[3 * i + 1]], self.widths[c[3 * i + 2]]) for i in range(arch.blocks)]

    def decode(self, arch: Arch) -> dict[str, Any]:
        """``{"space", "blocks": [{"op_a", "op_b", "width"}, ...]}``."""
        blocks = [{"op_a": a, "op_b": b, "width": w} for a, b, w in self.spec(arch)]
        return {"space": self.name, "stem_width": self.stem_width, "blocks": blocks}

    def arch_from_names(self, blocks: list[tuple[str, str, int]]) -> Arch:
        """The Arch for ``[(op_a, op_b, width), ...]``; unknown ops or widths raise InvalidArchitecture."""
        choices: list[int] = []
        for op_a, op_b, width in blocks:
            for op in (op_a, op_b):
                if op not in self.ops:
                    raise InvalidArchitecture(f"{self.name}: unknown op '{op}' (choose from: {', '.join(self.ops)})")
            if width not in self.widths:
                raise InvalidArchitecture(f"{self.name}: width {width} is not one of {list(self.widths)}")
            choices += [self.ops.index(op_a), self.ops.index(op_b), self.widths.index(width)]
        arch = Arch(tuple(choices), len(blocks))
        self.check(arch)
        return arch

    def build(self, arch: Arch) -> nn.Module:
        """The untrained ``nn.Module`` of ``arch``."""
        return build_model(self.spec(arch), self.input_shape, self.n_classes, self.stem_width)

    def architecture(self, arch: Arch) -> dict[str, Any]:
        """What rebuilds ``arch``'s model anywhere (:func:`~mlsysopt.models.cnn_cell.model_from_architecture`)."""
        blocks = [{"op_a": a, "op_b": b, "width": w} for a, b, w in self.spec(arch)]
        return {
            "format": ARCHITECTURE_FORMAT,
            "space": self.name,
            "input_shape": list(self.input_shape),
            "n_classes": self.n_classes,
            "stem_width": self.stem_width,
            "blocks": blocks,
            "arch": arch.to_dict(),
        }

    def train_images(self) -> int:
        """How many images one candidate trains on (counted without reading them)."""
        if self.root is None:
            return DIGITS_TRAIN
        classes = check_image_folder(self.root)
        per_class = [len(images_in(Path(self.root, "train", c))) for c in classes]
        if self.max_per_class is not None:
            per_class = [min(n, self.max_per_class) for n in per_class]
        return sum(n - min(n - 1, max(1, round(0.2 * n))) for n in per_class)  # 20% of each class held out

    def dataset_images(self) -> int:
        """Train, validation and test images together (what one process holds in memory while it evaluates)."""
        if self.root is None:
            return DIGITS_IMAGES
        classes = check_image_folder(self.root)
        total = sum(len(images_in(Path(self.root, part, c))) for part in ("train", "test") for c in classes)
        return total if self.max_per_class is None else min(total, 2 * len(classes) * self.max_per_class)

    def _preprocessing(self, split: Split) -> dict[str, Any]:
        """How raw images become the model's input (what a user of an exported model must do too)."""
        raw = "scikit-learn load_digits().images, values 0-16" if self.root is None else "RGB image, values 0-255"
        return {
            "input": f"{raw}, as float32 NCHW {list(self.input_shape)}",
            "scale": 1.0 / 16.0 if self.root is None else 1.0 / 255.0,
            "mean": list(split.mean),
            "std": list(split.std),
            "formula": "x[c] = (pixels[c] * scale - mean[c]) / std[c]",
            "classes": list(split.classes),
        }

    # ------------------------------------------------------------------ resources
    def resources(self, arch: Arch) -> dict[str, float]:
        """``params``, ``flops``, ``intensity`` (FLOPs/byte; closed form, equals the importer's) and ``latency_ms``."""
        return self.resources_for(arch, self.resource_names)

    def resources_for(self, arch: Arch, names: Collection[str]) -> dict[str, float]:
        """``params``, ``flops``, ``intensity``, and ``latency_ms`` (measured once, cached) only if ``names`` has it."""
        static = self._static_cache.get(arch)
        if static is None:  # spec() checks the architecture; a cached one was checked when it was cached
            static = static_resources(self.spec(arch), self.input_shape, self.n_classes, self.stem_width)
            self._static_cache[arch] = static
        out = dict(static)
        if "latency_ms" in names:
            if arch not in self._latency_cache:
                self._latency_cache[arch] = self._measure_latency(arch)
            out["latency_ms"] = self._latency_cache[arch]
        return out

    def importer_resources(self, arch: Arch) -> dict[str, float]:
        """``params``, ``flops`` and ``intensity`` of the built model via the torch.fx importer (the reference path)."""
        from mlsysopt.graph.importers.torch_fx import from_module  # deferred: torch_fx imports scipy and yaml

        self.check(arch)
        g = from_module(self.build(arch).eval(), torch.zeros(1, *self.input_shape), name=f"cnn{arch.choices}")
        params, flops = float(g.feature("params").sum()), float(g.feature("flops").sum())
        nbytes = float(g.feature("bytes_in").sum() + g.feature("bytes_out").sum()) + 4.0 * params
        return {"params": params, "flops": flops, "intensity": flops / nbytes if nbytes > 0 else 0.0}

    def _measure_latency(self, arch: Arch) -> float:
        """Median of ``latency_runs`` timed batch-1 forward passes (after 3 warm-up calls), one torch thread, in ms."""
        torch.manual_seed(0)
        model = self.build(arch).eval()
        x = torch.zeros(1, *self.input_shape)
        times = []
        with torch_threads(1), torch.no_grad():
            for i in range(self.latency_runs + 3):
                t0 = time.perf_counter()
                model(x)
                if i >= 3:  # the first calls warm up allocators and kernels
                    times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000.0

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the closed-form cache (cheap to recompute); measured latencies travel along."""
        return {**self.__dict__, "_static_cache": {}}

    # ------------------------------------------------------------------ training
    def dataset(self) -> Split:
        """The train/validation/test split every candidate is trained and scored on (cached per process)."""
        return self._split()

    def _split(self) -> Split:
        if self.root is None:
            return load_digits_split(self.split_seed)
        return load_image_folder_split(self.root, self.split_seed, self.max_per_class)

    def evaluate(self, arch: Arch, seed: int = 0) -> Evaluation:
        """Train for ``epochs`` epochs (Adam, one torch thread, deterministic for ``seed``); NaN loss -> ok=False."""
        self.check(arch)
        t0 = time.perf_counter()
        split = self._split()
        x_tr, y_tr = torch.from_numpy(split.x_train), torch.from_numpy(split.y_train)
        extra: dict[str, Any] = {"epochs": self.epochs, "seed": seed}
        with torch_threads(self.threads):
            torch.manual_seed(seed)
            model = self.build(arch)
            opt = _Adam(list(model.parameters()), self.lr)
            loss_fn = nn.CrossEntropyLoss()
            gen = torch.Generator().manual_seed(seed)
            loss = torch.tensor(0.0)
            for epoch in range(self.epochs):
                model.train()
                order = torch.randperm(len(x_tr), generator=gen)
                for i in range(0, len(order), self.batch_size):
                    idx = order[i : i + self.batch_size]
                    opt.zero_grad()
                    loss = loss_fn(model(x_tr[idx]), y_tr[idx])
                    if not math.isfinite(loss.item()):
                        return Evaluation(
                            arch,
                            float("nan"),
                            None,
                            self.resources(arch),
                            time.perf_counter() - t0,
                            ok=False,
                            error=f"training loss became {loss.item()} in epoch {epoch + 1}",
                            extra=extra,
                        )
                    loss.backward()
                    opt.step()
            valid = accuracy(model, torch.from_numpy(split.x_valid), torch.from_numpy(split.y_valid))
            test = accuracy(model, torch.from_numpy(split.x_test), torch.from_numpy(split.y_test))
        extra["train_loss"] = loss.item()
        extra["train_s"] = time.perf_counter() - t0
        ev = Evaluation(arch, valid, test, self.resources(arch), time.perf_counter() - t0, extra=extra)
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        ev.trained = {
            "state_dict": weights,
            "preprocessing": self._preprocessing(split),
            "architecture": self.architecture(arch),
        }
        return ev
