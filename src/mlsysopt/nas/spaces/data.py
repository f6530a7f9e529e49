"""Image datasets for the CNN space: scikit-learn's bundled digits, and a CIFAR-10-style image folder.

Nothing is downloaded. Splits are stratified and fixed by ``split_seed``; they are cached per process, so a
spawned executor worker loads a dataset once, on its first evaluation.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlsysopt.errors import InvalidDataset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
DIGITS_IMAGES = 1797  # scikit-learn's digits: 1,797 8x8 images
DIGITS_TRAIN = 1079  # of which the 60/20/20 split trains on 1,079
_SPLITS: dict[tuple[str, int, int | None], Split] = {}


@dataclass
class Split:
    """Train/valid/test arrays (float32 NCHW, normalised with train statistics; int64 labels)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_valid: np.ndarray
    y_valid: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    mean: tuple[float, ...] = ()  # per-channel statistics of the training images the arrays were normalised with
    std: tuple[float, ...] = ()

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """``(channels, height, width)`` of one image."""
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)


def _stratified(x: np.ndarray, y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    """``(x_keep, x_out, y_keep, y_out)`` holding out ``fraction`` of every class (at least one, never all)."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for cls in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == cls))
        out.append(idx[: min(len(idx) - 1, max(1, round(fraction * len(idx))))])
    out_idx = np.sort(np.concatenate(out))
    keep_idx = np.setdiff1d(np.arange(len(y)), out_idx)
    return x[keep_idx], x[out_idx], y[keep_idx], y[out_idx]


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """``(images (1797, 8, 8) in 0..16, labels)`` from the CSV scikit-learn ships (what ``load_digits`` reads)."""
    # Reading the packaged file directly skips importing scikit-learn (~3 s in every spawned worker).
    spec = importlib.util.find_spec("sklearn")
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0]) / "datasets" / "data" / "digits.csv.gz" if locations else None
    if path is not None and path.is_file():
        data = np.loadtxt(path, delimiter=",")
        return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits  # deferred: sklearn loads only for the digits data

    d = load_digits()
    return d.images, d.target.astype(np.int64)


def _normalise(split: Split) -> Split:
    mean = split.x_train.mean(axis=(0, 2, 3), keepdims=True)
    std = split.x_train.std(axis=(0, 2, 3), keepdims=True) + 1e-6
    for name in ("x_train", "x_valid", "x_test"):
        setattr(split, name, ((getattr(split, name) - mean) / std).astype(np.float32))
    split.mean, split.std = tuple(float(v) for v in mean.ravel()), tuple(float(v) for v in std.ravel())
    return split


def load_digits_split(split_seed: int = 0) -> Split:
    """Digits (1,797 8x8 images, 10 classes) split 60/20/20 train/valid/test, stratified, fixed by ``split_seed``."""
    key = ("digits", split_seed, None)
    if key not in _SPLITS:
        images, y = _digits_arrays()
        x = images.astype(np.float32)[:, None] / 16.0
        x_rest, x_test, y_rest, y_test = _stratified(x, y, 0.2, split_seed)
        x_train, x_valid, y_train, y_valid = _stratified(x_rest, y_rest, 0.25, split_seed + 1)
        classes = tuple(str(c) for c in range(10))
        _SPLITS[key] = _normalise(Split(x_train, y_train, x_valid, y_valid, x_test, y_test, classes))
    return _SPLITS[key]


# ---------------------------------------------------------------------- image folder
def _layout_error(root: Path, problem: str) -> InvalidDataset:
    return InvalidDataset(
        f"'{root}' is not a CIFAR-10 image folder: {problem}. Expected the ImageFolder layout "
        f"{root}/train/<class>/*.png and {root}/test/<class>/*.png (the same class folders in both, "
        f"at least 2 classes, images {'/'.join(IMAGE_SUFFIXES)}); nothing is downloaded"
    )


def images_in(folder: Path) -> list[Path]:
    """The image files directly in ``folder``, sorted."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def check_image_folder(root: str | Path) -> tuple[str, ...]:
    """The class names of an ImageFolder-layout dataset at ``root``; InvalidDataset naming the problem otherwise."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise _layout_error(root, "the folder does not exist" if not root.exists() else "it is not a folder")
    missing = [part for part in ("train", "test") if not (root / part).is_dir()]
    if missing:
        raise _layout_error(root, f"there is no {' or '.join(repr(p) for p in missing)} subfolder")
    found: dict[str, tuple[str, ...]] = {}
    for part in ("train", "test"):
        sub = root / part
        classes = tuple(sorted(p.name for p in sub.iterdir() if p.is_dir()))
        if images_in(sub):
            raise _layout_error(root, f"'{part}/' holds images directly instead of one subfolder per class")
        if len(classes) < 2:
            raise _layout_error(root, f"'{part}/' has {len(classes)} class folder(s)")
        empty = [c for c in classes if not images_in(sub / c)]
        if empty:
            raise _layout_error(root, f"class folder(s) {empty} in '{part}/' hold no images")
        found[part] = classes
    if found["train"] != found["test"]:
        train, test = list(found["train"]), list(found["test"])
        raise _layout_error(root, f"train classes {train} differ from test classes {test}")
    return found["train"]


def _read_image(path: Path) -> np.ndarray:
    from PIL import Image  # deferred: PIL loads only for image files

    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0
    except Exception as exc:
        raise InvalidDataset(f"cannot read image '{path}': {type(exc).__name__}: {exc}") from None


def _read_part(root: Path, part: str, classes: tuple[str, ...], limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for label, cls in enumerate(classes):
        for path in images_in(root / part / cls)[:limit]:
            xs.append(_read_image(path))
            ys.append(label)
    shapes = {x.shape for x in xs}
    if len(shapes) > 1:
        raise InvalidDataset(f"images under '{root / part}' have different sizes {sorted(shapes)}: resize them to one")
    return np.stack(xs).transpose(0, 3, 1, 2).copy(), np.asarray(ys, dtype=np.int64)


def image_folder_info(root: str | Path) -> tuple[tuple[str, ...], tuple[int, int, int]]:
    """``(classes, (3, height, width))`` of the dataset at ``root``: checks the layout and reads one image."""
    root = Path(root).expanduser()
    classes = check_image_folder(root)
    h, w, _ = _read_image(images_in(root / "train" / classes[0])[0]).shape
    return classes, (3, h, w)


def load_image_folder_split(root: str | Path, split_seed: int = 0, max_per_class: int | None = None) -> Split:
    """Train/valid from ``train/`` (20% of each class held out for valid), test from ``test/``; RGB in [0, 1]."""
    root = Path(root).expanduser()
    key = (str(root.resolve()), split_seed, max_per_class)
    if key not in _SPLITS:
        classes = check_image_folder(root)
        x, y = _read_part(root, "train", classes, max_per_class)
        x_test, y_test = _read_part(root, "test", classes, max_per_class)
        if x.shape[1:] != x_test.shape[1:]:
            raise InvalidDataset(f"'{root}': train images are {x.shape[2:]} but test images are {x_test.shape[2:]}")
        if np.bincount(y).min() < 2:
            raise InvalidDataset(f"'{root}': every class needs at least 2 training images (one goes to validation)")
        x_train, x_valid, y_train, y_valid = _stratified(x, y, 0.2, split_seed)
        _SPLITS[key] = _normalise(Split(x_train, y_train, x_valid, y_valid, x_test, y_test, classes))
    return _SPLITS[key]
