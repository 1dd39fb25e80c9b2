"""Q-network: an MLP whose layers map one-to-one onto a PolicySnapshot's layers."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: tuple[int, ...], out_dim: int) -> None:
        super().__init__()
        dims = (in_dim, *hidden, out_dim)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        out: torch.Tensor = self.layers[-1](x)
        return out

    @torch.no_grad()
    def export_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """fp32 ``[(W (in, out), b), ...]``: the layout the snapshot and onnxruntime use."""
        out = []
        for layer in self.layers:
            assert isinstance(layer, nn.Linear)
            w = np.ascontiguousarray(layer.weight.detach().cpu().numpy().T)
            out.append((w, layer.bias.detach().cpu().numpy().copy()))
        return out
