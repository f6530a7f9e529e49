"""Model builders shared by the systems above them: the NAS CNN cell space's PyTorch networks
(:mod:`mlsysopt.models.cnn_cell`), which NAS trains and the cost model's latency collection times.

The fixed example models users pass as ``zoo:NAME`` are in :mod:`mlsysopt.zoo`.
"""
