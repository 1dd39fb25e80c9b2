"""D4PG experiment configuration: one dataclass, every field documented (it is the CLI's --help).

Defaults follow the published agent as Acme ships it (Barth-Maron et al., ICLR 2018; Acme's
D4PG on the Control Suite): policy 256×256×256, critic LayerNorm MLP 512×512×256, 51 atoms on
[-150, 150] times a dmc: task's action repeat (Acme's has none), n-step 5, batch 256, Adam 1e-4
for both networks, target networks copied every 100 updates, Gaussian exploration.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from actorq.config import FINITE, POSITIVE, Bound, OffPolicyConfig, Widths, check_action_repeat
from actorq.errors import ConfigError


@dataclasses.dataclass
class D4PGConfig(OffPolicyConfig):
    """Train D4PG with quantized actors (ActorQ) on the embedded local backend."""

    agent: ClassVar[str] = "d4pg"
    width_fields: ClassVar[tuple[str, ...]] = ("policy_hidden_sizes", "critic_hidden_sizes")
    bounds: ClassVar[dict[str, Bound]] = {
        "action_repeat": Bound(1, 1000),
        "num_atoms": Bound(2, 10_000),
        "v_min": FINITE,
        "v_max": FINITE,
        "policy_learning_rate": POSITIVE,
        "critic_learning_rate": POSITIVE,
        "target_update_period": Bound(1, 10**9),
        "max_grad_norm": POSITIVE,
        "sigma_min": Bound(0, 10),
        "sigma_max": Bound(0, 10),
    }

    env: str = "dmc:cartpole-balance"
    """Environment id with continuous actions: dmc:<domain>-<task> (DeepMind Control Suite) or
    a Gymnasium MuJoCo id such as gym:HalfCheetah-v5 (both need the [control] extra)."""
    action_repeat: int = 1
    """Control steps each action is repeated for (dmc: ids only); rewards are summed."""
    policy_hidden_sizes: Widths = (256, 256, 256)
    """Hidden widths of the policy (what actors run, quantized), e.g. 2048,2048,2048."""
    critic_hidden_sizes: Widths = (512, 512, 256)
    """Hidden widths of the distributional critic (LayerNorm on the first layer)."""
    num_atoms: int = 51
    """Atoms of the categorical return distribution."""
    v_min: float | None = None
    """Lowest atom (return); default: -150 × action_repeat (see v_max)."""
    v_max: float | None = None
    """Highest atom (return); default: 150 × action_repeat on dmc: ids, else 150. Acme's ±150
    is for one control step per action (rewards in [0, 1]: discounted returns below
    1/(1-gamma), 100 at gamma 0.99); a repeat sums its rewards, so returns grow with it (up to
    200 at action_repeat 2), and a return past the top atom is clipped onto it."""
    n_step: int = 5
    """n of the n-step return targets."""
    batch_size: int = 256
    """Learner minibatch size."""
    policy_learning_rate: float = 1e-4
    """Adam learning rate of the policy."""
    critic_learning_rate: float = 1e-4
    """Adam learning rate of the critic."""
    target_update_period: int = 100
    """Learner updates between copies of the online networks into the target networks."""
    max_grad_norm: float = 40.0
    """Gradient norm clip (each network)."""
    sigma_min: float = 0.1
    """Exploration noise of the least exploratory environment instance (actions in [-1, 1])."""
    sigma_max: float = 0.5
    """Exploration noise of the most exploratory instance; the others are log-spaced between."""
    target_return: float | None = None
    """Stop once the greedy evaluation mean reaches this (e.g. 900 for dmc:cartpole-balance);
    default: none (Control Suite tasks register no threshold), so runs use total_steps."""
    total_steps: int = 200_000
    """Budget of environment steps (all actors together): agent decisions, each `--action-repeat`
    control steps on a dmc: task."""
    eval_every: int = 20_000
    """Environment steps between greedy evaluations with the actors' snapshot."""

    def env_kwargs(self) -> dict[str, Any]:
        extra = {"action_repeat": self.action_repeat} if self.env.startswith("dmc:") else {}
        return {**super().env_kwargs(), **extra}

    def support(self) -> tuple[float, float]:
        """(lowest, highest) atom: v_min and v_max where given, else Acme's per suite (its D4PG
        baselines, after Barth-Maron et al., ICLR 2018): ±150 on the Control Suite, times the
        action repeat the environment gets (rewards in [0, 1] per control step), and ±1000 on
        Gymnasium's ids, whose rewards are not normalised (HalfCheetah's ~10 a step discounts
        to ~1000; ±150 clamped every such target onto the top atom). Resolved where used,
        never written back: a run's config.json keeps what the user gave, and an older one,
        which holds ±150 whatever its env, keeps the support it ran with."""
        if not self.env.startswith("dmc:"):
            scale = 1000.0
        else:
            scale = 150.0 * self.env_kwargs().get("action_repeat", 1)
        lo = -scale if self.v_min is None else self.v_min
        hi = scale if self.v_max is None else self.v_max
        return lo, hi

    def validate(self) -> None:
        super().validate()
        check_action_repeat(self.env, self.action_repeat)
        v_min, v_max = self.support()
        if not v_min < v_max:
            raise ConfigError(f"need --v-min < --v-max, got {v_min} and {v_max}")
        if not self.sigma_min <= self.sigma_max:
            raise ConfigError("need --sigma-min <= --sigma-max")
