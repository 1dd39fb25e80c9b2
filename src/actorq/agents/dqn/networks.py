"""Q-networks whose exported layers map one-to-one onto a PolicySnapshot's plain MLP layers."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn


class MLP(nn.Module):
    """ReLU MLP Q-network, optionally with a dueling head.

    Dueling (Wang et al., "Dueling Network Architectures for Deep RL", ICML 2016):
    ``Q = V + A - mean(A)``. The last hidden layer is split in two halves, a value stream and
    an advantage stream, each with its own linear head. Why it is the default in actorq: the
    greedy action depends only on the advantage stream, whose activations are on the scale of
    the action gap rather than of the return, so int8 noise in the hidden layers flips far fewer
    near-tied actions than in a plain head (measured in docs/results.md). Both streams read the
    same input, so the whole network is still a plain MLP once exported: the last hidden layer
    is the concatenation of the streams, and the output layer is block-structured.
    """

    def __init__(
        self, in_dim: int, hidden: tuple[int, ...], out_dim: int, dueling: bool = False
    ) -> None:
        super().__init__()
        if dueling and (hidden[-1] < 2 or hidden[-1] % 2):
            raise ValueError(f"a dueling head needs an even last hidden width, got {hidden[-1]}")
        self.dueling = dueling
        self.out_dim = out_dim
        dims = (in_dim, *hidden)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        if dueling:
            half = hidden[-1] // 2
            self.value = nn.Linear(half, 1)
            self.advantage = nn.Linear(half, out_dim)
        else:
            self.head = nn.Linear(hidden[-1], out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        if not self.dueling:
            out: torch.Tensor = self.head(x)
            return out
        hv, ha = x.chunk(2, dim=-1)
        a = self.advantage(ha)
        return self.value(hv) + a - a.mean(dim=-1, keepdim=True)

    @torch.no_grad()
    def export_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """fp32 ``[(W (in, out), b), ...]``: the layout the snapshot and onnxruntime use.

        The weights are transposed *views* of the live parameters (on CPU): no copy here, the
        quantizer reads them in place and copies only its int8 result. Use them before the
        next update, or copy them.
        """
        out = []
        for layer in self.layers:
            assert isinstance(layer, nn.Linear)
            out.append(_numpy(layer.weight.T, layer.bias))
        if not self.dueling:
            out.append(_numpy(self.head.weight.T, self.head.bias))
            return out
        # Fold V + A - mean(A) into one (hidden, actions) matrix acting on [hv, ha].
        wv, bv = self.value.weight, self.value.bias  # (1, half), (1,)
        wa, ba = self.advantage.weight, self.advantage.bias  # (n, half), (n,)
        wa_c, ba_c = wa - wa.mean(0, keepdim=True), ba - ba.mean()
        w = torch.cat([wv.T.expand(-1, self.out_dim), wa_c.T], dim=0)
        out.append(_numpy(w, bv + ba_c))
        return out


def _numpy(w: torch.Tensor, b: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    # At 3×2048, copying the transposed fp32 weights out was ~2/3 of the learner's publish
    # time; a view costs nothing (benchmarks/snapshot_publish.py).
    return w.detach().cpu().numpy(), b.detach().cpu().numpy().astype(np.float32, copy=True)
