"""The C51 projection against hand-computed cases, and a property over supports."""

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from actorq.agents.d4pg.categorical import categorical_projection

ATOMS = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])


def project(p: list[float], r: float, d: float) -> list[float]:
    out = categorical_projection(
        ATOMS, torch.tensor([p], dtype=torch.float32), torch.tensor([r]), torch.tensor([d])
    )
    return [round(x, 6) for x in out[0].tolist()]


def test_identity_when_no_reward_and_no_discounting() -> None:
    assert project([0.1, 0.2, 0.3, 0.25, 0.15], 0.0, 1.0) == [0.1, 0.2, 0.3, 0.25, 0.15]


def test_shift_by_a_whole_atom() -> None:
    # r = +1 moves every atom up one; the top atom's mass is clipped at z_max
    assert project([0.1, 0.2, 0.3, 0.25, 0.15], 1.0, 1.0) == [0.0, 0.1, 0.2, 0.3, 0.4]


def test_split_between_neighbours() -> None:
    # all mass at z = 0, r = 0.25 -> 0.25 lies between 0 and 1: 75% to 0, 25% to 1
    assert project([0, 0, 1, 0, 0], 0.25, 0.5) == [0.0, 0.0, 0.75, 0.25, 0.0]
    # discount 0.5 halves the atoms: z=2 -> 1, z=-1 -> -0.5 (split half/half to -1 and 0)
    assert project([0, 0.5, 0, 0, 0.5], 0.0, 0.5) == [0.0, 0.25, 0.25, 0.5, 0.0]


def test_mass_beyond_the_support_piles_on_the_edges() -> None:
    assert project([0.2, 0.2, 0.2, 0.2, 0.2], 10.0, 1.0) == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert project([0.2, 0.2, 0.2, 0.2, 0.2], -10.0, 1.0) == [1.0, 0.0, 0.0, 0.0, 0.0]
    # r = -1.5 from z = -2 lands at -3.5 -> clipped to -2; from z = 2 lands at 0.5
    assert project([0.5, 0, 0, 0, 0.5], -1.5, 1.0) == [0.5, 0.0, 0.25, 0.25, 0.0]


def test_termination_collapses_to_the_reward() -> None:
    # discount 0: the whole distribution becomes a point mass at r (split if between atoms)
    assert project([0.1, 0.2, 0.3, 0.25, 0.15], 1.0, 0.0) == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert project([0.1, 0.2, 0.3, 0.25, 0.15], -0.5, 0.0) == [0.0, 0.5, 0.5, 0.0, 0.0]


def test_rows_sum_to_one_on_random_inputs() -> None:
    g = torch.Generator().manual_seed(0)
    atoms = torch.linspace(-150, 150, 51)
    p = torch.softmax(torch.randn(256, 51, generator=g), 1)
    r = torch.randn(256, generator=g) * 50
    d = (torch.rand(256, generator=g) > 0.1).float() * 0.99**5
    out = categorical_projection(atoms, p, r, d)
    torch.testing.assert_close(out.sum(1), torch.ones(256))
    # the mean is preserved wherever nothing is clipped
    inside = ((r[:, None] + d[:, None] * atoms).abs() <= 150).all(1)
    mean_in = (p * (r[:, None] + d[:, None] * atoms)).sum(1)
    torch.testing.assert_close((out * atoms).sum(1)[inside], mean_in[inside], rtol=1e-4, atol=1e-3)


@settings(max_examples=300, deadline=None)
# ±53 with 51 atoms: (53 - -53) / Δz rounds to one ulp above 50, so a target at v_max indexed
# atom 51 (IndexError on the CPU, a device assert on CUDA)
@example(v_min=-53, span=106, num_atoms=51, reward=53.0, discount=0.0)
@example(v_min=-53, span=106, num_atoms=51, reward=5.0, discount=0.95)  # 5 + 0.95·53 > 53
@given(
    v_min=st.integers(-1000, 1000),
    span=st.integers(1, 2000),
    num_atoms=st.integers(2, 201),
    reward=st.floats(-3000, 3000, width=32),
    discount=st.floats(0, 1, width=32),
)
def test_projection_keeps_every_target_on_the_support(
    v_min: int, span: int, num_atoms: int, reward: float, discount: float
) -> None:
    atoms = torch.linspace(v_min, v_min + span, num_atoms)
    lo, hi = atoms[0], atoms[-1]
    top = torch.zeros(num_atoms).index_fill_(0, torch.tensor([num_atoms - 1]), 1.0)
    bottom = top.flip(0)
    uniform = torch.full((num_atoms,), 1.0 / num_atoms)
    probs = torch.stack([top, bottom, uniform])
    r, d = torch.full((3,), reward), torch.full((3,), discount)
    out = categorical_projection(atoms, probs, r, d)

    assert (out >= 0).all()
    torch.testing.assert_close(out.sum(1), torch.ones(3))
    # a point mass keeps its (clipped) mean: the two neighbours split it by closeness
    target = (r[:2] + d[:2] * torch.stack([hi, lo])).clamp(lo, hi)
    torch.testing.assert_close(
        (out[:2] * atoms).sum(1), target, rtol=0, atol=1e-5 * (abs(v_min) + span)
    )
    # a row whose every target is at or beyond an edge lies wholly on that edge's atom
    tz = r[:, None] + d[:, None] * atoms
    held = probs > 0
    for row in range(3):
        if (tz[row] >= hi)[held[row]].all():
            assert (out[row, :-1] == 0).all() and torch.isclose(out[row, -1], torch.tensor(1.0))
        if (tz[row] <= lo)[held[row]].all():
            assert (out[row, 1:] == 0).all() and torch.isclose(out[row, 0], torch.tensor(1.0))
