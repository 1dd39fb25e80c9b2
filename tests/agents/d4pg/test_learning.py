"""D4PG update rule: n-step distributional targets and a critic that fits them."""

import numpy as np
import torch

from actorq.agents.d4pg.learning import D4PGLearner


def batch(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        "action": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        "reward": rng.uniform(-2, 2, n).astype(np.float32),
        "discount": np.where(rng.random(n) < 0.2, 0.0, 0.99**5).astype(np.float32),
        "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
    }


def small(policy_lr: float = 1e-4, critic_lr: float = 1e-4) -> D4PGLearner:
    return D4PGLearner(
        3, 1, (32, 32), (64, 32), 21, -10, 10, policy_lr=policy_lr, critic_lr=critic_lr
    )


def test_terminal_targets_are_the_n_step_return_alone() -> None:
    learner = small()
    b = batch(64, 0)
    b["discount"][:] = 0.0
    b["reward"][:] = 2.5  # between atoms 2 and 3 (spacing 1): half to each
    target = learner.target_distribution(b)
    atoms = learner.atoms
    torch.testing.assert_close((target * atoms).sum(1), torch.full((64,), 2.5))
    assert ((target > 0).sum(1) == 2).all()


def test_bootstrapped_target_mean_is_r_plus_discounted_next_mean() -> None:
    learner = small()
    b = batch(64, 1)
    b["reward"] *= 0.2  # |r| + 0.95 * 10 < 10: no mass is clipped at the support's edges
    with torch.no_grad():
        nxt = torch.as_tensor(b["next_obs"])
        p = torch.softmax(learner.target_critic(nxt, learner.target_policy(nxt)), 1)
        want = torch.as_tensor(b["reward"]) + torch.as_tensor(b["discount"]) * (
            p * learner.atoms
        ).sum(1)
    got = (learner.target_distribution(b) * learner.atoms).sum(1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_critic_fits_a_fixed_batch_and_policy_climbs_it() -> None:
    learner = small(critic_lr=1e-3)  # a critic faster than the policy, as in DDPG
    learner.target_update_period = 10**9  # fixed targets: a regression problem
    b = batch(256, 2)
    # a reward the critic can learn, best at action 0.5 whatever the state
    b["reward"] = 2 * b["obs"][:, 0] - 4 * (b["action"][:, 0] - 0.5) ** 2
    target_mean = (learner.target_distribution(b) * learner.atoms).sum(1)
    obs, act = torch.as_tensor(b["obs"]), torch.as_tensor(b["action"])

    def mean_error() -> float:
        with torch.no_grad():
            p = torch.softmax(learner.critic(obs, act), 1)
        return float(((p * learner.atoms).sum(1) - target_mean).abs().mean())

    def policy_gap() -> float:
        with torch.no_grad():
            return float((learner.policy(obs) - 0.5).abs().mean())

    err0, gap0 = mean_error(), policy_gap()
    for _ in range(400):
        learner.update(b)
    assert mean_error() < 0.5 * err0
    assert policy_gap() < 0.5 * gap0
    layers = learner.policy_layers()
    assert [w.shape for w, _ in layers] == [(3, 32), (32, 32), (32, 1)]


def test_state_round_trip_restores_networks_and_optimizers() -> None:
    from safetensors.torch import load, save

    a = small()
    b = batch(64, 3)
    for _ in range(3):
        a.update(b)
    tensors, meta = a.state()
    restored = small()
    restored.load_state(load(save(tensors)), meta)  # through safetensors bytes, as on disk
    assert restored.updates == 3
    ra, rb = a.update(b), restored.update(b)  # same state -> the same next step
    assert ra == rb
