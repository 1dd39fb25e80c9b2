import itertools

import numpy as np
import pytest
import torch

from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.networks import MLP
from actorq.errors import ConfigError


@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("hidden", [(64,), (32, 48)])
def test_exported_plain_mlp_computes_the_same_q_values(dueling: bool, hidden: tuple) -> None:
    torch.manual_seed(0)
    net = MLP(5, hidden, 3, dueling=dueling)
    x = torch.randn(100, 5)
    want = net(x).detach().numpy()
    h = x.numpy()
    layers = net.export_layers()
    dims = (5, *hidden, 3)
    assert [w.shape for w, _ in layers] == list(itertools.pairwise(dims))
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0)
    np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-5)


def test_dueling_advantages_are_centred() -> None:
    torch.manual_seed(1)
    net = MLP(4, (16,), 2, dueling=True)
    x = torch.randn(10, 4)
    q = net(x)
    hv, _ = torch.relu(net.layers[0](x)).chunk(2, dim=-1)
    np.testing.assert_allclose(q.mean(1).detach(), net.value(hv)[:, 0].detach(), atol=1e-6)


def test_dueling_needs_an_even_last_width() -> None:
    with pytest.raises(ValueError, match="even"):
        MLP(4, (15,), 2, dueling=True)
    with pytest.raises(ConfigError, match="even"):
        DQNConfig(hidden=(64, 33)).validate()
    DQNConfig(hidden=(64, 33), dueling=False).validate()
