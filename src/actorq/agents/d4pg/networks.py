"""D4PG networks: a deterministic policy MLP (exported to snapshots like DQN's) and a
distributional critic with LayerNorm (Acme's D4PG critic shape)."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn


class Policy(nn.Module):
    """obs → ReLU MLP → tanh → action in [-1, 1]^d (the env wrapper rescales to its bounds).

    The tanh stays fp32 in snapshots: it is the spec's output activation, not a weight.
    """

    def __init__(self, obs_dim: int, hidden: tuple[int, ...], act_dim: int) -> None:
        super().__init__()
        dims = (obs_dim, *hidden, act_dim)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return torch.tanh(self.layers[-1](x))

    @torch.no_grad()
    def export_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """fp32 ``[(W (in, out), b), ...]``: the layout the snapshot and onnxruntime use (the
        weights are transposed views of the live parameters, as in the DQN network)."""
        return [
            (
                layer.weight.detach().cpu().numpy().T,
                layer.bias.detach().cpu().numpy().astype(np.float32, copy=True),
            )
            for layer in self.layers
            if isinstance(layer, nn.Linear)
        ]


class DistributionalCritic(nn.Module):
    """(obs, action) → logits over ``num_atoms`` return atoms.

    Layers: Linear → LayerNorm → tanh on the concatenated input (Acme's LayerNormMLP: the
    normalized first layer keeps the critic stable when observation scales differ), then ELU
    layers, then the atom logits.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], num_atoms: int) -> None:
        super().__init__()
        first, *rest = hidden
        self.inp = nn.Linear(obs_dim + act_dim, first)
        self.norm = nn.LayerNorm(first)
        dims = (first, *rest)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.out = nn.Linear(dims[-1], num_atoms)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.norm(self.inp(torch.cat([obs, action], dim=-1))))
        for layer in self.layers:
            h = nn.functional.elu(layer(h))
        logits: torch.Tensor = self.out(h)
        return logits
