"""The categorical (C51) distributional target of D4PG's critic.

D4PG (Barth-Maron et al., "Distributed Distributional Deterministic Policy Gradients", ICLR
2018) models the return of (s, a) as a categorical distribution on fixed atoms z_1 < ... < z_N
(C51: Bellemare, Dabney & Munos, "A Distributional Perspective on RL", ICML 2017). The n-step
target distribution puts the mass p_j of atom z_j on r + d·z_j (d: the discount the adder folded
in, 0 at termination), clipped to [z_1, z_N], and splits it between the two nearest atoms in
proportion to closeness. That projection keeps the target on the critic's support, so the
cross-entropy loss compares like with like.
"""

from __future__ import annotations

import torch


def categorical_projection(
    atoms: torch.Tensor, probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor
) -> torch.Tensor:
    """Project the distribution ``reward + discount * Z`` onto ``atoms``.

    ``atoms`` (N,) evenly spaced; ``probs`` (B, N) the next-state distribution; ``reward`` and
    ``discount`` (B,). Returns (B, N) probabilities on ``atoms`` (each row sums to 1).
    """
    v_min, v_max = atoms[0], atoms[-1]
    n = atoms.shape[0]
    tz = (reward[:, None] + discount[:, None] * atoms[None, :]).clamp(v_min, v_max)
    # The fractional atom index of each target. C51's (tz - v_min) / Δz, with Δz = (v_max -
    # v_min) / (N - 1), rounds in float32 to one ulp above N - 1 for a target at v_max on some
    # supports (±53 with 51 atoms), and ceil() then indexes atom N; one ulp below, it leaks
    # mass to atom N - 2. Dividing by the span itself gives exactly 0 and N - 1 at the edges,
    # and the clamp keeps every index on the support whatever the rounding.
    b = ((tz - v_min) / (v_max - v_min) * (n - 1)).clamp(0, n - 1)
    lower = b.floor().long()
    upper = b.ceil().long()
    # Mass landing exactly on an atom (lower == upper) must stay whole there.
    w_upper = b - lower.to(b.dtype)
    w_lower = 1.0 - w_upper
    out = torch.zeros_like(probs)
    out.scatter_add_(1, lower, probs * w_lower)
    out.scatter_add_(1, upper, probs * w_upper)
    return out
