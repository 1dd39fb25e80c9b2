"""PPO's networks, by ``PPOConfig.network``:

* ``mlp``: a policy MLP that exports one-to-one onto a snapshot's plain MLP layers, and a
  separate value MLP that never leaves the learner;
* ``mlp`` with pixel observations ``(C, H, W)``: the Nature-CNN (Mnih et al. 2015), one
  trunk with a policy and a value head (:class:`NatureCNNPolicy`, :class:`NatureCNNValue`);
* ``chip``: the macro placement policy and value networks of :mod:`actorq.agents.ppo.chip_networks`
  (Mirhoseini et al., Nature 2021), built for the netlist of ``chip:<netlist>``; the policy is
  exported whole to ONNX for the actors (:mod:`actorq.agents.ppo.chip`).

:func:`make_networks` is the one place either pair is built; the update rule
(:mod:`actorq.agents.ppo.learning`) only needs ``policy(obs) -> logits | mean`` and
``value(obs) -> values`` on flat ``(B, obs_dim)`` observations.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from actorq.agents.pixels import NATURE_FEATURES, NatureCNN, is_pixels
from actorq.quant.onnx import host
from actorq.types import EnvSpec

if TYPE_CHECKING:
    from actorq.agents.ppo.config import PPOConfig


class MLP(nn.Module):
    """``in → hidden... → out`` with ``activation`` between layers and a linear output.

    Orthogonal initialisation (CleanRL's ``layer_init``): hidden layers gain √2, the output
    ``out_gain`` (0.01 for the policy, so initial actions are near uniform / near the mean;
    1 for the value), biases 0.
    """

    def __init__(
        self,
        in_dim: int,
        hidden: tuple[int, ...],
        out_dim: int,
        activation: str = "tanh",
        ortho_init: bool = True,
        out_gain: float = 1.0,
    ) -> None:
        super().__init__()
        dims = (in_dim, *hidden, out_dim)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.act = torch.tanh if activation == "tanh" else torch.relu
        if ortho_init:
            for i, layer in enumerate(self.layers):
                assert isinstance(layer, nn.Linear)
                last = i == len(self.layers) - 1
                nn.init.orthogonal_(layer.weight, out_gain if last else math.sqrt(2))
                nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = self.act(layer(x))
        out: torch.Tensor = self.layers[-1](x)
        return out

    @torch.no_grad()
    def export_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """fp32 ``[(W (in, out), b), ...]``: the snapshot's layout (transposed views of the live
        weights, as in the other agents' networks)."""
        return [
            (
                layer.weight.detach().cpu().numpy().T,
                layer.bias.detach().cpu().numpy().astype(np.float32, copy=True),
            )
            for layer in self.layers
            if isinstance(layer, nn.Linear)
        ]


class NatureCNNPolicy(nn.Module):
    """PPO's policy for pixels (CleanRL's ``ppo_atari.py``): the Nature-CNN trunk
    (:class:`~actorq.agents.pixels.NatureCNN`, Mnih et al. 2015, orthogonal init) and a linear
    policy head (gain 0.01). The value head (:class:`NatureCNNValue`) reads the same trunk."""

    def __init__(self, obs_shape: tuple[int, ...], out_dim: int) -> None:
        super().__init__()
        self.torso = NatureCNN(obs_shape, ortho_init=True)
        self.head = nn.Linear(NATURE_FEATURES, out_dim)
        nn.init.orthogonal_(self.head.weight, 0.01)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.torso(x))
        return out

    @torch.no_grad()
    def export_head(self) -> tuple[np.ndarray, np.ndarray]:
        """The policy head over the trunk's features, fp32 ``(W (512, out), b)``."""
        return (
            host(self.head.weight).T.astype(np.float32),
            host(self.head.bias).astype(np.float32),
        )


class NatureCNNValue(nn.Module):
    """The value head (gain 1) over :class:`NatureCNNPolicy`'s trunk: one trunk for both heads
    (a shared torso, as CleanRL's Atari PPO). The trunk is not a submodule here, so its
    parameters belong to the policy alone (optimized and checkpointed once); gradients of the
    value loss still reach it."""

    def __init__(self, policy: NatureCNNPolicy) -> None:
        super().__init__()
        self._torso = [policy.torso]  # a list: not registered as this module's parameters
        self.head = nn.Linear(NATURE_FEATURES, 1)
        nn.init.orthogonal_(self.head.weight, 1.0)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self._torso[0](x))
        return out


def policy_and_value(
    policy: nn.Module, value: nn.Module, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(policy(x), value(x))``, with a shared Nature-CNN trunk run once for both heads (as
    CleanRL's ``ppo_atari.py`` computes its hidden features once): the trunk is nearly all of
    a pixel update's work, and running it per head doubled it. The gradients are the same
    sums, in another order."""
    if (
        isinstance(policy, NatureCNNPolicy)
        and isinstance(value, NatureCNNValue)
        and value._torso[0] is policy.torso
    ):
        h = policy.torso(x)
        return policy.head(h), value.head(h)
    return policy(x), value(x)


def make_networks(cfg: PPOConfig, spec: EnvSpec) -> tuple[nn.Module, nn.Module]:
    """``(policy, value)`` for ``cfg.network``, on the CPU (the learner moves them), initialised
    from torch's current generator (the learner seeds it first).

    ``policy(obs (B, obs_dim))`` gives a categorical policy's logits (discrete actions) or a
    Gaussian's mean (continuous ones); ``value(obs)`` gives ``(B,)`` or ``(B, 1)`` values.
    """
    if cfg.network == "chip":
        from actorq.agents.ppo.chip_networks import ChipPolicy, ChipValue
        from actorq.chip.env import ChipPlacementEnv
        from actorq.envs import make_env

        # one env for both: the networks read its layout and netlist graph, never step it (so
        # no force-directed placer is set up)
        env = make_env(cfg.env, use_fd=False)
        if not isinstance(env, ChipPlacementEnv):
            raise TypeError(f"--network chip needs a chip:<netlist> env, got {cfg.env!r}")
        try:
            return ChipPolicy(env), ChipValue(env)
        finally:
            env.close()
    act_dim = spec.num_actions if spec.discrete else int(np.prod(spec.action.shape))
    if is_pixels(spec):
        cnn = NatureCNNPolicy(spec.observation.shape, act_dim)
        return cnn, NatureCNNValue(cnn)
    policy = MLP(spec.obs_dim, cfg.policy_hidden(), act_dim, cfg.activation, cfg.ortho_init, 0.01)
    value = MLP(spec.obs_dim, tuple(cfg.value_hidden_sizes), 1, cfg.activation, cfg.ortho_init, 1.0)
    return policy, value
