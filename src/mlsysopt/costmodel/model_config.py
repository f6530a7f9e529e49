"""The architecture of a cost model (:class:`ModelConfig`): backbone, widths, readout, per-task feature sizes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from mlsysopt.costmodel.data.record import TASKS
from mlsysopt.errors import InvalidOption

BACKBONES: tuple[str, ...] = ("sage", "gcn", "gin")
READOUTS: tuple[str, ...] = ("embedding", "scalar")

_TASK_DEFAULTS = {
    "layout": {
        "node_feat_dim": 140,
        "config_feat_dim": 18,
        "num_classes": 1,
        "opcode_dim": 16,
        "readout": "scalar",
    },
    "tile": {"node_feat_dim": 140, "config_feat_dim": 24, "num_classes": 1, "opcode_dim": 16, "readout": "scalar"},
    "malnet": {"node_feat_dim": 5, "config_feat_dim": 0, "num_classes": 5, "opcode_dim": 0},
}


@dataclass
class ModelConfig:
    """Architecture of a :class:`CostModel`; validated on creation (InvalidOption).

    Defaults are sized for a CPU: the TpuGraphs reference uses hidden 256 and a 128-d opcode embedding.
    ``config_feat_dim`` is per node for layout (18), per graph for tile (24), 0 for MalNet.

    Args:
        task: ``"layout"``, ``"tile"`` or ``"malnet"``.
        backbone: GNN layer type: ``"sage"``, ``"gcn"`` or ``"gin"``.
        hidden: Hidden width of the GNN layers.
        layers: Number of GNN layers.
        opcode_vocab: Size of the opcode embedding table.
        opcode_dim: Width of the opcode embedding (0: none, as for MalNet).
        node_feat_dim: Node feature width (140 for TpuGraphs, 5 for MalNet).
        config_feat_dim: Configuration feature width: per node for layout (18), per graph for tile (24), 0 for MalNet.
        num_classes: Output width: 1 for ranking, the number of classes for MalNet.
        dropout: Dropout probability, in [0, 1).
        readout: ``"embedding"`` (head of the summed segment embeddings) or ``"scalar"`` (sum of per-segment heads).
        deviation: Layout only: add a config column marking nodes that deviate from their usual setting.
        cross_config_heads: Heads of a cross-configuration attention before the head MLP (0: none).

    Raises:
        InvalidOption: If a field is out of range or inconsistent with ``task``.
    """

    task: str = "layout"
    backbone: str = "sage"
    hidden: int = 64
    layers: int = 3
    opcode_vocab: int = 128
    opcode_dim: int = 16
    node_feat_dim: int = 140
    config_feat_dim: int = 18
    num_classes: int = 1
    dropout: float = 0.1
    readout: str = "embedding"  # embedding: head(sum of segment embeddings) | scalar: sum of head(segment)
    deviation: bool = False  # layout: one more config column, 1 where a node deviates from its usual setting
    cross_config_heads: int = 0  # > 0: cross-configuration attention with this many heads before the head MLP

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def for_task(cls, task: str, **overrides: object) -> ModelConfig:
        """A config with the feature sizes of ``task`` (layout, tile or malnet), updated by ``overrides``."""
        if task not in _TASK_DEFAULTS:
            raise InvalidOption(f"unknown task '{task}' (choose from: {', '.join(TASKS)})")
        return cls(task=task, **{**_TASK_DEFAULTS[task], **overrides})  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """Rebuild from :meth:`to_dict` output (unknown keys are an InvalidOption)."""
        names = {f.name for f in fields(cls)}
        extra = sorted(set(d) - names)
        if extra:
            raise InvalidOption(f"unknown model config keys: {', '.join(extra)}")
        return cls(**d)

    def to_dict(self) -> dict:
        """Plain dict of every field."""
        return asdict(self)

    @property
    def embed_dim(self) -> int:
        """Width of one segment embedding (max and mean pooling concatenated)."""
        return 2 * self.hidden

    @property
    def unit_dim(self) -> int:
        """Width of what is summed over segments (and kept in the history table): embed_dim, or 1 for scalar."""
        return 1 if self.readout == "scalar" else self.embed_dim

    def validate(self) -> None:
        """Raise InvalidOption on a field out of range."""
        if self.task not in TASKS:
            raise InvalidOption(f"unknown task '{self.task}' (choose from: {', '.join(TASKS)})")
        if self.backbone not in BACKBONES:
            raise InvalidOption(f"unknown backbone '{self.backbone}' (choose from: {', '.join(BACKBONES)})")
        for name in ("hidden", "layers", "node_feat_dim", "opcode_vocab"):
            if int(getattr(self, name)) < 1:
                raise InvalidOption(f"model {name} must be >= 1, got {getattr(self, name)}")
        if self.opcode_dim < 0 or self.config_feat_dim < 0:
            raise InvalidOption("opcode_dim and config_feat_dim must be >= 0")
        if self.task == "malnet":
            if self.num_classes < 2:
                raise InvalidOption(f"malnet needs num_classes >= 2, got {self.num_classes}")
            if self.config_feat_dim != 0:
                raise InvalidOption("malnet graphs have no configurations: config_feat_dim must be 0")
        else:
            if self.num_classes != 1:
                raise InvalidOption(f"{self.task} predicts one runtime per config: num_classes must be 1")
            if self.config_feat_dim < 1:
                raise InvalidOption(f"{self.task} needs config_feat_dim >= 1 (18 for layout, 24 for tile)")
        if not 0.0 <= self.dropout < 1.0:
            raise InvalidOption(f"dropout must be in [0, 1), got {self.dropout}")
        if self.readout not in READOUTS:
            raise InvalidOption(f"unknown readout '{self.readout}' (choose from: {', '.join(READOUTS)})")
        if self.deviation and self.task != "layout":
            raise InvalidOption("deviation describes layout configurations: it is for layout models only")
        if self.cross_config_heads < 0 or (self.cross_config_heads and self.task != "layout"):
            raise InvalidOption("cross-configuration attention needs >= 0 heads and is for layout models only")
        if self.readout == "scalar" and self.task == "malnet":
            raise InvalidOption("the scalar readout sums per-segment runtimes: it is for layout and tile, not malnet")
