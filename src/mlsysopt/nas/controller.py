"""ENAS-style LSTM controller and its REINFORCE update, shared by EPNAS and the REINFORCE baseline.

The controller decodes one decision per LSTM step (Pham et al., ENAS): the step's hidden state goes through that
decision's own linear decoder, the logits are squashed to ``c · tanh(x / T)`` (so no option's probability collapses
to 0 or 1 early), an option is sampled, and its embedding is the next step's input. Because ``decisions(b)`` is a
prefix of ``decisions(b + 1)``, one controller built for ``max_blocks`` samples architectures of any number of
blocks by stopping after the first ``len(decisions(b))`` steps: the progressive stages share every weight.

:class:`Reinforce` is the policy-gradient step: ``loss = −log π(a)·(r − b)/σ − β·H(π)`` with a moving-average
baseline ``b`` and a moving estimate ``σ`` of the rewards' spread (so the entropy weight ``β`` means the same on
any reward scale: accuracies near 0.8 differ by hundredths). Samples that earned no reward (infeasible under hard
constraints, or failed) get a fixed advantage ``penalty`` in those units (default −1: one spread below the
baseline) and do not move ``b`` or ``σ``: a reward far below every real one would otherwise inflate ``σ`` and drown
the differences between feasible architectures.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from mlsysopt.nas.knobs import MAX_WIDTH, knob
from mlsysopt.nas.spaces.base import Arch
from mlsysopt.runtime.threads import torch_threads


class Controller(nn.Module):
    """LSTM policy over a sequence of categorical decisions (``options[i]`` choices for decision ``i``).

    Args:
        options: Number of options of each decision, in decoding order; each >= 1.
        hidden: LSTM width.
        temperature: Logit temperature (logits = tanh_c * tanh(x / temperature)).
        tanh_c: Logit range.
        seed: Seed of the weight initialization.

    Raises:
        ValueError: If ``options`` is empty or a decision has no option.
    """

    def __init__(
        self,
        options: Sequence[int],
        hidden: int = 64,
        temperature: float = 5.0,
        tanh_c: float = 2.5,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not options or min(options) < 1:
            raise ValueError(f"every decision needs at least one option, got {list(options)}")
        self.options = [int(n) for n in options]
        self.hidden = hidden
        self.temperature = temperature
        self.tanh_c = tanh_c
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.start = nn.Parameter(torch.zeros(1, hidden))
            self.lstm = nn.LSTMCell(hidden, hidden)
            self.embeds = nn.ModuleList(nn.Embedding(n, hidden) for n in self.options)
            self.decoders = nn.ModuleList(nn.Linear(hidden, n) for n in self.options)
            for p in self.parameters():
                nn.init.uniform_(p, -0.1, 0.1)  # ENAS's init: near-uniform policy at the start

    @property
    def max_decisions(self) -> int:
        """How many decisions the controller can decode (those of ``max_blocks``)."""
        return len(self.options)

    def _logits(self, h: torch.Tensor, i: int) -> torch.Tensor:
        x = self.decoders[i](h) / self.temperature
        return self.tanh_c * torch.tanh(x) if self.tanh_c else x

    def sample(
        self,
        n_decisions: int,
        batch: int = 1,
        generator: torch.Generator | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch`` samples of the first ``n_decisions`` decisions: choices ``[B, n]``, log-prob, entropy ``[B]``.

        With ``prefixes`` (one per row, any length), row ``b`` keeps ``prefixes[b]`` as its first decisions and the
        controller samples only the rest, conditioned on them.
        """
        if not 1 <= n_decisions <= self.max_decisions:
            raise ValueError(f"n_decisions must be in 1..{self.max_decisions}, got {n_decisions}")
        forced = torch.zeros(batch, n_decisions, dtype=torch.long)
        plen = torch.zeros(batch, dtype=torch.long)
        for b, p in enumerate(prefixes or ()):
            p = list(p)[:n_decisions]
            forced[b, : len(p)], plen[b] = torch.as_tensor(p, dtype=torch.long), len(p)
        x = self.start.expand(batch, -1)
        state = None
        choices, log_prob, entropy = [], torch.zeros(batch), torch.zeros(batch)
        for i in range(n_decisions):
            h, c = self.lstm(x, state)
            state = (h, c)
            logp = torch.log_softmax(self._logits(h, i), dim=-1)
            a = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
            a = torch.where(plen > i, forced[:, i], a)
            log_prob = log_prob + logp.gather(1, a[:, None]).squeeze(1)
            entropy = entropy - (logp.exp() * logp).sum(-1)
            choices.append(a)
            x = self.embeds[i](a)
        return torch.stack(choices, 1), log_prob, entropy

    def evaluate(self, choices: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability ``[B]`` and entropy ``[B]`` of given choice sequences (lengths may differ)."""
        batch = len(choices)
        length = max(len(c) for c in choices)
        if length > self.max_decisions:
            raise ValueError(f"a choice sequence is longer than the controller's {self.max_decisions} decisions")
        lengths = np.fromiter((len(c) for c in choices), dtype=np.int64, count=batch)
        filled = np.arange(length) < lengths[:, None]
        pad_np = np.zeros((batch, length), np.int64)
        pad_np[filled] = np.fromiter((int(a) for seq in choices for a in seq), dtype=np.int64)  # row by row, in order
        pad, mask = torch.from_numpy(pad_np), torch.from_numpy(filled.astype(np.float32))
        x = self.start.expand(batch, -1)
        state = None
        log_prob, entropy = torch.zeros(batch), torch.zeros(batch)
        for i in range(length):
            h, c = self.lstm(x, state)
            state = (h, c)
            logp = torch.log_softmax(self._logits(h, i), dim=-1)
            a = pad[:, i]
            log_prob = log_prob + mask[:, i] * logp.gather(1, a[:, None]).squeeze(1)
            entropy = entropy - mask[:, i] * (logp.exp() * logp).sum(-1)
            x = self.embeds[i](a)
        return log_prob, entropy


class Reinforce:
    """REINFORCE with a moving-average baseline, reward-scale normalisation and an entropy bonus.

    Args:
        controller: The policy to train.
        lr: Adam learning rate.
        entropy: Entropy bonus weight.
        baseline_decay: Decay of the moving-average reward baseline and reward spread, in [0, 1).
        grad_clip: Largest gradient norm per step.
    """

    def __init__(
        self,
        controller: Controller,
        lr: float = 0.01,
        entropy: float = 1e-3,
        baseline_decay: float = 0.9,
        grad_clip: float = 5.0,
    ) -> None:
        self.controller = controller
        self.optimizer = torch.optim.Adam(controller.parameters(), lr=lr)
        self.entropy = entropy
        self.decay = baseline_decay
        self.grad_clip = grad_clip
        self.baseline: float | None = None
        self.var: float | None = None
        self.steps = 0

    def update(
        self,
        choices: Sequence[Sequence[int]],
        rewards: Sequence[float],
        penalised: Sequence[Sequence[int]] = (),
        penalty: float = -1.0,
    ) -> dict[str, float]:
        """One gradient step on ``(choices, rewards)`` plus ``penalised`` choices (infeasible, failed) whose
        normalised advantage is ``penalty``; only real rewards move the baseline and the scale."""
        adv = torch.zeros(0)
        if len(rewards):
            r = torch.as_tensor([float(x) for x in rewards], dtype=torch.float32)
            mean = float(r.mean())
            if self.baseline is None or self.var is None:
                self.baseline, self.var = mean, float(r.var(unbiased=False)) if len(r) > 1 else 0.0
            raw = r - self.baseline
            self.var = self.decay * self.var + (1 - self.decay) * float((raw**2).mean())
            adv = raw / max(self.var**0.5, 1e-8)
            self.baseline = self.decay * self.baseline + (1 - self.decay) * mean
        adv = torch.cat([adv, torch.full((len(penalised),), float(penalty))])
        return self.step([*choices, *penalised], adv)

    def step(self, choices: Sequence[Sequence[int]], advantages: torch.Tensor) -> dict[str, float]:
        """One gradient step of ``−mean(log π(a)·advantage) − β·mean(H)`` (advantages already normalised)."""
        if not len(choices):
            return {"loss": 0.0, "entropy": 0.0, "baseline": self.baseline or 0.0}
        with torch_threads(1):
            log_prob, ent = self.controller.evaluate(choices)
        return self.step_on(log_prob, ent, advantages)

    def step_on(self, log_prob: torch.Tensor, ent: torch.Tensor, advantages: torch.Tensor) -> dict[str, float]:
        """:meth:`step` on the log-probabilities and entropies of the sampled choices (with their autograd graph,
        e.g. from :meth:`Controller.sample` with gradients on: no second pass over the same choices)."""
        with torch_threads(1):
            loss = -(log_prob * advantages).mean() - self.entropy * ent.mean()
            self.optimizer.zero_grad()
            loss.backward()
            if self.grad_clip:
                nn.utils.clip_grad_norm_(self.controller.parameters(), self.grad_clip)
            self.optimizer.step()
        self.steps += 1
        return {"loss": float(loss.detach()), "entropy": float(ent.mean().detach()), "baseline": self.baseline or 0.0}

    def state_dict(self) -> dict[str, Any]:
        """Controller, optimizer and baseline statistics (torch.save-able with ``weights_only=True``)."""
        return {  # copies: the live tensors keep changing with every update
            "controller": copy.deepcopy(self.controller.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "baseline": self.baseline,
            "var": self.var,
            "steps": self.steps,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.controller.load_state_dict(d["controller"])
        self.optimizer.load_state_dict(d["optimizer"])
        self.baseline, self.var, self.steps = d["baseline"], d["var"], int(d["steps"])


def sample_archs(
    controller: Controller,
    options: Sequence[int],
    blocks: int,
    batch: int,
    generator: torch.Generator,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> list[Arch]:
    """``batch`` architectures of ``blocks`` blocks (``options = space.decisions(blocks)``), completing ``prefixes``."""
    with torch.no_grad(), torch_threads(1):
        choices, _, _ = controller.sample(len(options), batch, generator, prefixes)
    return [Arch(tuple(row), blocks) for row in choices.tolist()]


@dataclass
class ControllerConfig:
    """The controller and policy-gradient knobs EPNAS and the REINFORCE baseline share (their configs inherit them).

    Args:
        hidden: Controller LSTM width, 1 to 4096.
        temperature: Logit temperature (logits = tanh_c * tanh(x / temperature)), > 0.
        tanh_c: Logit range of the controller, > 0.
        lr: Controller Adam learning rate, > 0.
        entropy: Entropy bonus weight, >= 0.
        baseline_decay: Decay of the moving-average reward baseline, in [0, 1).
        penalty: Normalized advantage given to infeasible, invalid or failed samples.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    hidden: int = knob(64, 1, MAX_WIDTH)  # controller LSTM width
    temperature: float = knob(5.0, 0, lo_open=True)  # logits = tanh_c · tanh(x / temperature) (ENAS)
    tanh_c: float = knob(2.5, 0, lo_open=True)
    lr: float = knob(0.01, 0, lo_open=True)  # controller Adam learning rate
    entropy: float = knob(1e-3, 0)  # entropy bonus weight
    baseline_decay: float = knob(0.9, 0, 1, hi_open=True)  # moving-average baseline (and reward-spread) decay
    penalty: float = knob(-1.0)  # normalised advantage of infeasible, invalid or failed samples


class Policy:
    """A controller, its REINFORCE step, its sampling generator and the infeasible samples awaiting the penalty.

    Args:
        options: ``space.decisions(space.max_blocks)``; fewer blocks decode a prefix of them.
        cfg: the controller knobs.
        seed: seeds the controller's weights and the sampling generator.
    """

    def __init__(self, options: Sequence[int], cfg: ControllerConfig, seed: int) -> None:
        self.controller = Controller(options, cfg.hidden, cfg.temperature, cfg.tanh_c, seed=seed)
        self.pg = Reinforce(self.controller, lr=cfg.lr, entropy=cfg.entropy, baseline_decay=cfg.baseline_decay)
        self.gen = torch.Generator().manual_seed(seed)
        self.penalty = cfg.penalty
        self.infeasible: list[Arch] = []  # sampled but infeasible or invalid since the last update

    def sample(
        self, options: Sequence[int], blocks: int, batch: int, prefixes: Sequence[Sequence[int]] | None = None
    ) -> list[Arch]:
        """``batch`` architectures of ``blocks`` blocks (``options = space.decisions(blocks)``), by the generator."""
        return sample_archs(self.controller, options, blocks, batch, self.gen, prefixes)

    def sample_for_step(
        self, options: Sequence[int], blocks: int, batch: int
    ) -> tuple[list[Arch], torch.Tensor, torch.Tensor]:
        """:meth:`sample`, with the log-probabilities and entropies of the samples (and their autograd graph) for a
        :meth:`Reinforce.step_on` on all of them, in the order sampled."""
        with torch_threads(1):
            choices, log_prob, ent = self.controller.sample(len(options), batch, self.gen)
        return [Arch(tuple(row), blocks) for row in choices.tolist()], log_prob, ent

    def update(
        self,
        choices: Sequence[Sequence[int]],
        rewards: Sequence[float],
        failed: Sequence[Sequence[int]],
        told: int,
        rng: np.random.Generator,
    ) -> None:
        """One REINFORCE step on ``rewards``; ``failed`` choices and up to ``told`` of the remembered infeasible
        samples (drawn with ``rng``) get the penalty, and the remembered samples are cleared."""
        penalised = list(failed)
        n_pen = min(len(self.infeasible), told)
        if n_pen:
            idx = rng.choice(len(self.infeasible), n_pen, replace=False)
            penalised += [self.infeasible[i].choices for i in sorted(idx)]
        self.infeasible = []
        self.pg.update(choices, rewards, penalised, self.penalty)

    def state_dict(self) -> dict[str, Any]:
        """Controller, optimizer, baseline, sampling generator and pending penalties."""
        return {
            "pg": self.pg.state_dict(),
            "gen": self.gen.get_state(),
            "infeasible": [(list(a.choices), a.blocks) for a in self.infeasible],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.pg.load_state_dict(d["pg"])
        self.gen.set_state(d["gen"])
        self.infeasible = [Arch(tuple(c), b) for c, b in d["infeasible"]]
