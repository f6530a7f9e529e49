"""The latency oracle: real latencies measured here, predictors side by side, and the oracle NAS, serving and
placement use.

* :mod:`.collect` -- ``costmodel collect-latency``: eleven model families timed under ONNX Runtime and PyTorch eager
  (:mod:`.families`, :mod:`.settings`, :mod:`.timing`); the shipped collection is ``real:cpu`` (:mod:`.dataset`);
* :mod:`.predictors`, :mod:`.additive_mlp` and :mod:`.gnn` -- FLOPs-proportional, nn-Meter-style additive per-op
  (linear per category, and a per-node MLP trained on whole-model times), LightGBM on graph summaries, their
  ensemble, and a GraphSAGE with an absolute loss (features in :mod:`.features`);
* :mod:`.oracle` -- :class:`~.oracle.LatencyOracle`, a fitted predictor with its interval and out-of-distribution
  flags (``builtin`` is the shipped one); :mod:`.api` loads, predicts, measures and trains;
* :mod:`.evaluate` -- within +-10%, Spearman, best-setting choice, few-shot transfer;
* :mod:`.op_costs` -- a CPU device's per-op times for the simulator (``--op-costs``).
"""
