"""DQN's Q-networks: an MLP whose exported layers map one-to-one onto a PolicySnapshot's plain
MLP layers, or for pixels the Nature-CNN (:func:`make_q_network` picks by observation shape)."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn

from actorq.agents.pixels import NATURE_FEATURES, NatureCNN, is_pixels
from actorq.types import EnvSpec


class QHead(nn.Module):
    """The output layer of a Q-network over ``width`` features: one linear ``head``, or a
    dueling pair ``value``/``advantage`` over the two halves of the features (see :class:`MLP`).
    A mixin, so the layers keep their names in checkpoints."""

    dueling: bool
    out_dim: int

    def init_head(self, width: int, out_dim: int, dueling: bool) -> None:
        self.dueling, self.out_dim = dueling, out_dim
        if dueling:
            self.value = nn.Linear(width // 2, 1)
            self.advantage = nn.Linear(width // 2, out_dim)
        else:
            self.head = nn.Linear(width, out_dim)

    def output_layers(self) -> list[nn.Linear]:
        """The layers that make the network's output: a dueling head's two."""
        return [self.value, self.advantage] if self.dueling else [self.head]

    def q_values(self, h: torch.Tensor) -> torch.Tensor:
        if not self.dueling:
            out: torch.Tensor = self.head(h)
            return out
        hv, ha = h.chunk(2, dim=-1)
        a = self.advantage(ha)
        return self.value(hv) + a - a.mean(dim=-1, keepdim=True)


class MLP(QHead):
    """ReLU MLP Q-network, optionally with a dueling head.

    Dueling (Wang et al., "Dueling Network Architectures for Deep RL", ICML 2016):
    ``Q = V + A - mean(A)``. The last hidden layer is split in two halves, a value stream and
    an advantage stream, each with its own linear head. Why it is the default in actorq: the
    greedy action depends only on the advantage stream, whose activations are on the scale of
    the action gap rather than of the return, so int8 noise in the hidden layers flips far fewer
    near-tied actions than in a plain head (measured: ``git show 85997d5:docs/results.md``).
    Both streams read the same input, so the whole network is still a plain MLP once exported:
    the last hidden layer is the concatenation of the streams, and the output layer is
    block-structured.
    """

    def __init__(
        self, in_dim: int, hidden: tuple[int, ...], out_dim: int, dueling: bool = False
    ) -> None:
        super().__init__()
        if dueling and (hidden[-1] < 2 or hidden[-1] % 2):
            raise ValueError(f"a dueling head needs an even last hidden width, got {hidden[-1]}")
        dims = (in_dim, *hidden)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.init_head(hidden[-1], out_dim, dueling)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.q_values(x)

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
        out.append(fold_dueling(self.value, self.advantage))
        return out


def fold_dueling(value: nn.Linear, advantage: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
    """``V + A - mean(A)`` of a dueling head as one ``(hidden, actions)`` matrix acting on the
    concatenated streams ``[hv, ha]``, and its bias."""
    wv, bv = value.weight, value.bias  # (1, half), (1,)
    wa, ba = advantage.weight, advantage.bias  # (n, half), (n,)
    wa_c, ba_c = wa - wa.mean(0, keepdim=True), ba - ba.mean()
    w = torch.cat([wv.T.expand(-1, wa.shape[0]), wa_c.T], dim=0)
    return _numpy(w, bv + ba_c)


class NatureQNetwork(QHead):
    """DQN's convolutional Q-network for pixels (Mnih et al., Nature 2015): the Nature-CNN
    torso (:class:`~actorq.agents.pixels.NatureCNN`, uint8 in, /255 on the device) and a
    linear head over its 512 features.

    Dueling (Wang et al., ICML 2016) as in :class:`MLP`: the 512 features split in halves, a
    value and an advantage stream, so the exported network is the torso and one folded output
    layer (:func:`fold_dueling`). (Wang et al. give each stream its own 512-unit layer after the
    convolutions; the split keeps the Nature network's size and one export path.)
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, dueling: bool = True) -> None:
        super().__init__()
        self.torso = NatureCNN(obs_shape)
        self.init_head(NATURE_FEATURES, num_actions, dueling)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q_values(self.torso(x))

    @torch.no_grad()
    def export_head(self) -> tuple[np.ndarray, np.ndarray]:
        """The output layer over the torso's features, fp32 ``(W (512, actions), b)``."""
        if self.dueling:
            return fold_dueling(self.value, self.advantage)
        return _numpy(self.head.weight.T, self.head.bias)


def make_q_network(spec: EnvSpec, hidden: tuple[int, ...], dueling: bool) -> MLP | NatureQNetwork:
    """The Q-network for ``spec``'s observations: :class:`NatureQNetwork` for images
    ``(C, H, W)``, else an :class:`MLP` of ``hidden`` widths over the flat observation."""
    if is_pixels(spec):
        return NatureQNetwork(spec.observation.shape, spec.num_actions, dueling)
    return MLP(spec.obs_dim, hidden, spec.num_actions, dueling=dueling)


def _numpy(w: torch.Tensor, b: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    # At 3×2048, copying the transposed fp32 weights out was ~2/3 of the learner's publish
    # time; a view costs nothing (benchmarks/snapshot_publish.py).
    return w.detach().cpu().numpy(), b.detach().cpu().numpy().astype(np.float32, copy=True)
