"""PPO's networks: a policy MLP that exports one-to-one onto a snapshot's plain MLP layers, and
a separate value MLP that never leaves the learner."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from torch import nn


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
