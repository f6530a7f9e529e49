"""A learned per-op latency summed along the graph: one small MLP maps every node (its op, shapes, the ops around
it) to its milliseconds under each setting, and a model's latency is their sum.

nn-Meter (Zhang et al., MobiSys 2021, https://doi.org/10.1145/3458864.3467882) times every kernel on its own and fits
a regressor per kernel type; :class:`~mlsysopt.costmodel.oracle.predictors.AdditivePerOp` does it with a linear,
size-binned regressor per op category fitted on whole-model times. Here the per-op regressor is one MLP shared by
every op (the op and its category are inputs), trained end to end on whole-model times: the gradient of the loss on
``log(sum of node times)`` reaches every node's estimate, so no kernel is timed alone. What a node's time depends on
beyond its own shapes -- whether it follows a convolution ONNX Runtime fuses it into, whether it feeds two branches
the parallel executor overlaps -- enters as the categories of its producers and consumers and its in/out degree.

Rows are one per (node, batch); the MLP has one output per trained setting, so a node's estimates under all
settings of a batch come from one forward pass. Identical rows (repeated blocks, shared stems) are computed once.
"""

from __future__ import annotations

import base64
import itertools
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mlsysopt.costmodel.oracle.dataset import COLUMNS, TimedModel
from mlsysopt.costmodel.oracle.features import ALIGN, CATEGORIES, OP_NAMES, categories
from mlsysopt.costmodel.oracle.predictors import PREDICTORS, LatencyPredictor, nearest_setting
from mlsysopt.costmodel.oracle.settings import Setting
from mlsysopt.errors import InvalidCheckpoint, InvalidDataset

#: Op names with their own input column (the categories group them; within one, a GELU is not a ReLU).
OPS = OP_NAMES
_NUMERIC = ("log_flops", "log_act_bytes", "log_weight_bytes", "log_out_elems", "log_in_channels", "log_out_channels",
            "log_groups", "log_kernel_area", "aligned", "fused", "log2_batch")  # fmt: skip
_CONTEXT = ("log_in_degree", "log_out_degree", "log_nodes")
#: Input columns of a node row, in order.
NODE_FEATURES: tuple[str, ...] = (*(f"cat_{c}" for c in CATEGORIES), *(f"op_{o}" for o in OPS), *_NUMERIC,
                                  *(f"producer_{c}" for c in CATEGORIES), *(f"consumer_{c}" for c in CATEGORIES),
                                  *_CONTEXT)  # fmt: skip
_C = {c: COLUMNS.index(c) for c in COLUMNS}
#: What a node's time is made of: ``ms = exp(o_flops) x GFLOPs + exp(o_act) x activation MB + exp(o_weight) x weight
#: MB + exp(o_launch) x 1 us``, the four ``o`` the MLP's outputs for the setting (a per-node roofline whose
#: efficiencies are learned). A time as ``exp`` of one output cannot learn that a layer's time grows with its FLOPs:
#: the gradient reaching a node is its share of the total, so a node that starts small stays small.
TERMS = ("gflops", "act_mb", "weight_mb", "launch_us")
_LOG = {n: NODE_FEATURES.index(n) for n in ("log_flops", "log_act_bytes", "log_weight_bytes")}


def terms(rows: np.ndarray) -> np.ndarray:
    """Every node's :data:`TERMS` from its (unstandardized) :func:`node_rows`.

    Shapes:
        rows: (n, len(NODE_FEATURES)); returns (n, len(TERMS))
    """
    return np.c_[np.expm1(rows[:, _LOG["log_flops"]]) / 1e9, np.expm1(rows[:, _LOG["log_act_bytes"]]) / 1e6,
                 np.expm1(rows[:, _LOG["log_weight_bytes"]]) / 1e6, np.full(len(rows), 1e-3)]  # fmt: skip


def unique_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``x`` and, for every row, the index of its distinct row (``np.unique(x, axis=0)``'s
    answer up to the order of the distinct rows, 10x faster: a 64-bit hash per row is sorted instead of the rows,
    and the rows are compared once to rule out a collision).

    Shapes:
        x: (n, k); returns (u, k) and (n,) int64
    """
    words = np.ascontiguousarray(x).view(np.uint8).reshape(len(x), -1).view(np.uint32).astype(np.uint64)
    h = np.zeros(len(x), np.uint64)
    with np.errstate(over="ignore"):
        for col in words.T:  # FNV-style: multiply by an odd 64-bit prime, add the next word
            h = h * np.uint64(1099511628211) + col
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    if not (x[first][inverse] == x).all():  # a collision: fall back to comparing the rows
        unique, inverse = np.unique(x, axis=0, return_inverse=True)
        return unique, inverse.ravel()
    return x[first], inverse.ravel()


def node_rows(ops: np.ndarray, nodes: np.ndarray, edges: np.ndarray | None, batch: int) -> np.ndarray:
    """Every node's input row at ``batch`` (:data:`NODE_FEATURES`): its category and op (one-hot), log sizes at the
    batch, whether PyTorch eager runs it fused, and the categories of the nodes it reads from and feeds (multi-hot).

    Args:
        ops: Op name of every node.
        nodes: Node table at batch 1 (:data:`~mlsysopt.costmodel.oracle.dataset.COLUMNS`).
        edges: ``(src, dst)`` node ids of the data edges; ``None`` leaves the context columns empty.
        batch: Batch size.

    Shapes:
        ops: (n,); nodes: (n, len(COLUMNS)); edges: (2, e); returns (n, len(NODE_FEATURES)) float32
    """
    n, k = len(ops), len(CATEGORIES)
    cat = categories(ops, nodes, "onnxruntime")
    out = np.zeros((n, len(NODE_FEATURES)), np.float32)
    rows = np.arange(n)
    out[rows, cat] = 1.0
    op_index = {o: i for i, o in enumerate(OPS)}
    known = np.array([str(o) in op_index for o in ops], bool)
    out[rows[known], k + np.array([op_index[str(o)] for o in ops[known]], np.int64)] = 1.0
    j = k + len(OPS)
    aligned = (nodes[:, _C["in_channels"]] % ALIGN == 0) & (nodes[:, _C["out_channels"]] % ALIGN == 0)
    out[:, j : j + len(_NUMERIC)] = np.c_[
        np.log1p(nodes[:, _C["flops"]] * batch),
        np.log1p((nodes[:, _C["bytes_in"]] + nodes[:, _C["bytes_out"]]) * batch),
        np.log1p(nodes[:, _C["params"]] * 4),
        np.log1p(nodes[:, _C["out_elems"]] * batch),
        np.log1p(nodes[:, _C["in_channels"]]),
        np.log1p(nodes[:, _C["out_channels"]]),
        np.log(np.maximum(nodes[:, _C["groups"]], 1.0)),
        np.log1p(nodes[:, _C["kernel_area"]]),
        aligned,
        nodes[:, _C["fused"]] > 0,
        np.full(n, np.log2(batch)),
    ]
    j += len(_NUMERIC)
    if edges is not None and edges.size:
        src, dst = edges[0], edges[1]
        out[dst, j + cat[src]] = 1.0
        out[src, j + k + cat[dst]] = 1.0
        out[:, j + 2 * k] = np.log1p(np.bincount(dst, minlength=n))
        out[:, j + 2 * k + 1] = np.log1p(np.bincount(src, minlength=n))
    out[:, j + 2 * k + 2] = np.log(max(n, 1))
    return out


@dataclass
class AdditiveMLPConfig:
    """The knobs of :class:`AdditiveMLP` (chosen on the validation models of ``real:cpu``).

    Args:
        hidden: Width of the MLP's two hidden layers.
        epochs: Passes over the training models.
        lr: Adam's learning rate (cosine-annealed to 0 over the epochs).
        chunks: Minibatches per epoch (of whole models: every node of a model is in the same one).
        huber_delta: Huber loss threshold on the log-time error (0.1 = 10%; beyond it an error costs linearly, so a
            run the engine stalled on does not pull every estimate).
    """

    hidden: int = 128
    epochs: int = 400
    lr: float = 3e-3
    chunks: int = 8
    huber_delta: float = 0.1


def _encode(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, "<f4").tobytes()).decode()


def _decode(s: str, shape: list[int]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), "<f4").reshape(shape).astype(np.float64)


class AdditiveMLP(LatencyPredictor):
    """``ms = exp(c_setting) + sum over nodes of exp(MLP(node row)[setting])``, trained on whole-model log times.

    Args:
        seed: Seed of the initial weights and the minibatch order.
        config: The knobs (:class:`AdditiveMLPConfig`); ``epochs`` alone may be given as a keyword.
    """

    name = "additive-mlp"
    seeded = True

    def __init__(self, seed: int = 0, config: AdditiveMLPConfig | None = None, epochs: int | None = None) -> None:
        self.seed = seed
        self.config = config or AdditiveMLPConfig()
        if epochs is not None:
            self.config = AdditiveMLPConfig(**(asdict(self.config) | {"epochs": epochs}))
        self.keys: list[str] = []
        self.weights: list[np.ndarray] = []
        self.const = np.zeros(0)
        self.mu = self.sd = np.zeros(0)

    # ------------------------------------------------------------------ training
    def _rows(self, models: list[TimedModel], settings: list[Setting]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Node rows, their (model, batch) group, and each group's log-ms per setting (NaN: not timed, or a setting of
        another batch)."""
        x, group, y = [], [], []
        for m in models:
            for b in sorted({s.batch for s in settings}):
                target = np.full(len(settings), np.nan)
                for j, s in enumerate(settings):
                    if s.batch == b and s.key in m.ms:
                        target[j] = np.log(m.ms[s.key])
                if np.isnan(target).all():
                    continue
                x.append(node_rows(m.ops, m.nodes, m.edges, b))
                group.append(np.full(len(m.ops), len(y)))
                y.append(target)
        if not y:
            raise InvalidDataset("additive-mlp: no model has a time under the settings to learn")
        return np.concatenate(x), np.concatenate(group), np.array(y)

    def fit(self, models: list[TimedModel], settings: list[Setting]) -> AdditiveMLP:
        import torch  # deferred: PyTorch loads only when this predictor is trained

        cfg = self.config
        x_all, group, y = self._rows(models, settings)
        self.keys = [s.key for s in settings]
        # a column no training node varies in (an op no training model had) is left unscaled: divided by its ~0
        # spread, a user model's one node of that op read 1e6 and was priced at 163 ms instead of 0.0004
        self.mu, self.sd = x_all.mean(0), x_all.std(0)
        self.sd[self.sd < 1e-3] = 1.0
        unique, row_of = unique_rows(x_all)
        gen = torch.Generator().manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        dims = [len(NODE_FEATURES), cfg.hidden, cfg.hidden, len(settings) * len(TERMS)]
        layers: list[Any] = []
        for a, b in itertools.pairwise(dims):
            lin = torch.nn.Linear(a, b)
            bound = 1.0 / np.sqrt(a)  # PyTorch's default init, drawn from our generator so the seed decides it
            with torch.no_grad():
                lin.weight.uniform_(-bound, bound, generator=gen)
                lin.bias.uniform_(-bound, bound, generator=gen)
            layers += [lin, torch.nn.SiLU()]
        mlp = torch.nn.Sequential(*layers[:-1])
        const = torch.nn.Parameter(torch.full((len(settings),), -3.0))
        opt = torch.optim.Adam([*mlp.parameters(), const], lr=cfg.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.epochs)
        ux = torch.tensor((unique - self.mu) / self.sd, dtype=torch.float32)
        ut = torch.tensor(terms(unique), dtype=torch.float32)[:, None, :]
        timed = torch.tensor(~np.isnan(y))
        target = torch.tensor(np.nan_to_num(y), dtype=torch.float32)
        first = np.searchsorted(group, np.arange(len(y)))
        last = np.searchsorted(group, np.arange(len(y)), side="right")
        for _ in range(cfg.epochs):
            for chunk in np.array_split(rng.permutation(len(y)), min(cfg.chunks, len(y))):
                chunk = np.sort(chunk)
                idx = np.concatenate([np.arange(first[c], last[c]) for c in chunk])
                local = np.zeros(len(y), np.int64)
                local[chunk] = np.arange(len(chunk))
                rows, inverse = np.unique(row_of[idx], return_inverse=True)
                coef = torch.exp(mlp(ux[rows]).clamp(-20.0, 12.0).view(len(rows), len(settings), len(TERMS)))
                per_node = (coef * ut[rows]).sum(-1)[torch.from_numpy(inverse.ravel())]
                total = torch.zeros(len(chunk), len(settings)).index_add_(0, torch.from_numpy(local[group[idx]]),
                                                                          per_node)  # fmt: skip
                pred = torch.log(total + torch.exp(const))
                mask = timed[chunk]
                loss = torch.nn.functional.huber_loss(pred[mask], target[chunk][mask], delta=cfg.huber_delta)
                opt.zero_grad()
                loss.backward()
                opt.step()
            sched.step()
        self.weights = [p.detach().numpy().astype(np.float64) for p in mlp.parameters()]
        self.const = const.detach().numpy().astype(np.float64)
        return self

    # ------------------------------------------------------------------ prediction
    def _head(self, setting: Setting) -> int:
        return self.keys.index(setting.key if setting.key in self.keys else nearest_setting(self.keys, setting))

    def per_op(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting,
               edges: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
        """Every node's milliseconds under ``setting`` (the setting's constant on the first node); they sum to
        :meth:`predict`.

        Shapes:
            returns (n,) ms
        """
        x = node_rows(ops, nodes, edges, setting.batch)
        h, w = (x - self.mu) / self.sd, self.weights
        for i in range(0, len(w) - 2, 2):
            h = h @ w[i].T + w[i + 1]
            h = h * 0.5 * (1.0 + np.tanh(0.5 * h))  # SiLU (x sigmoid x, without overflow)
        j = self._head(setting)
        k = len(TERMS)
        coef = np.exp(np.clip(h @ w[-2][j * k : (j + 1) * k].T + w[-1][j * k : (j + 1) * k], -20.0, 12.0))
        out = (coef * terms(x)).sum(1)
        out[0] += np.exp(self.const[j])
        return out

    def predict(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting, edges: np.ndarray | None = None) -> float:
        return float(self.per_op(ops, nodes, setting, edges).sum())

    # ------------------------------------------------------------------ saving
    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "config": asdict(self.config), "keys": self.keys,
                "features": list(NODE_FEATURES), "mu": self.mu.tolist(), "sd": self.sd.tolist(),
                "const": self.const.tolist(),
                "weights": [{"shape": list(w.shape), "f32": _encode(w)} for w in self.weights]}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AdditiveMLP:
        if list(d["features"]) != list(NODE_FEATURES):
            raise InvalidCheckpoint(f"an additive-mlp model on {len(d['features'])} node features, this "
                                    f"mlsysopt computes {len(NODE_FEATURES)}: train it again ('costmodel "
                                    "latency-train')")  # fmt: skip
        out = cls(int(d["seed"]), AdditiveMLPConfig(**d["config"]))
        out.keys = [str(k) for k in d["keys"]]
        out.mu, out.sd = np.asarray(d["mu"], np.float64), np.asarray(d["sd"], np.float64)
        out.const = np.asarray(d["const"], np.float64)
        out.weights = [_decode(w["f32"], w["shape"]) for w in d["weights"]]
        if len(out.const) != len(out.keys) or out.weights[-1].shape != (len(out.keys) * len(TERMS),):
            raise InvalidCheckpoint("an additive-mlp model whose output heads do not match its settings")
        return out


PREDICTORS[AdditiveMLP.name] = AdditiveMLP
