"""The D4PG update rule, readable top to bottom.

D4PG (Barth-Maron et al., "Distributed Distributional Deterministic Policy Gradients", ICLR
2018): DDPG's deterministic policy gradient (Lillicrap et al., 2016) with a categorical
distributional critic (C51), n-step returns and target networks. The critic minimizes the cross
entropy to the projected target distribution of r + γⁿ Z'(s', π'(s')); the policy ascends the
critic's expected value E[Z(s, π(s))]. Targets are updated every ``target_update_period``
learner steps (Acme's D4PG), not by Polyak averaging.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from actorq.agents.d4pg.categorical import categorical_projection
from actorq.agents.d4pg.networks import DistributionalCritic, Policy
from actorq.agents.optim import adam
from actorq.agents.state import pack, unpack
from actorq.agents.step import TorchLearner, copy_params_
from actorq.core.interfaces import MLPLearner
from actorq.types import Batch


class D4PGLearner(TorchLearner, MLPLearner):
    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        policy_hidden: tuple[int, ...] = (256, 256, 256),
        critic_hidden: tuple[int, ...] = (512, 512, 256),
        num_atoms: int = 51,
        v_min: float = -150.0,
        v_max: float = 150.0,
        policy_lr: float = 1e-4,
        critic_lr: float = 1e-4,
        target_update_period: int = 100,
        max_grad_norm: float = 40.0,
        device: str = "cpu",
        seed: int = 0,
        learner_mode: str = "auto",
    ) -> None:
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.policy = Policy(obs_dim, policy_hidden, act_dim).to(self.device)
        self.critic = DistributionalCritic(obs_dim, act_dim, critic_hidden, num_atoms)
        self.critic.to(self.device)
        self.target_policy = copy.deepcopy(self.policy).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.atoms = torch.linspace(v_min, v_max, num_atoms, device=self.device)
        self.policy_opt = adam(self.policy.parameters(), policy_lr)
        self.critic_opt = adam(self.critic.parameters(), critic_lr)
        self.target_update_period = target_update_period
        self.max_grad_norm = max_grad_norm
        self.updates = 0
        modules = [self.policy, self.critic]
        self.init_runner(learner_mode, modules, [self.policy_opt, self.critic_opt])

    def _t(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    @torch.no_grad()
    def target_distribution(self, batch: Batch | dict[str, torch.Tensor]) -> torch.Tensor:
        """The projected n-step target: r + d·Z'(s', π'(s')) on the critic's atoms."""
        next_obs = self._t(batch["next_obs"])
        probs = F.softmax(self.target_critic(next_obs, self.target_policy(next_obs)), dim=-1)
        return categorical_projection(
            self.atoms, probs, self._t(batch["reward"]), self._t(batch["discount"])
        )

    def step(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One update on a batch already on the device; returns metric tensors (no sync)."""
        obs, action = b["obs"], b["action"]
        target = self.target_distribution(b)

        logits = self.critic(obs, action)
        critic_loss = -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.max_grad_norm)
        self.critic_opt.step()

        # Policy: maximize the expected return under the (just updated) critic.
        act = self.policy(obs)
        q = (F.softmax(self.critic(obs, act), dim=-1) * self.atoms).sum(-1)
        policy_loss = -q.mean()
        self.policy_opt.zero_grad(set_to_none=True)
        policy_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        self.policy_opt.step()
        return {
            "losses/critic_loss": critic_loss.detach(),
            "losses/policy_loss": policy_loss.detach(),
            "losses/q_values": q.detach().mean(),
            # a tanh policy stuck at its bounds has no gradient left and acts the same in every
            # state (a D4PG failure seen once on an H200: a flat evaluation return for 70k steps)
            "policy/saturated_frac": (act.detach().abs() > 0.995).float().mean(),
        }

    def after_step(self) -> None:
        self.updates += 1
        if self.updates % self.target_update_period == 0:
            copy_params_(self.target_policy, self.policy)
            copy_params_(self.target_critic, self.critic)

    def policy_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.policy.export_layers()

    # -- checkpointing: tensors go to safetensors, the rest to JSON ---------------------------
    def _parts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        modules = {
            "policy": self.policy,
            "critic": self.critic,
            "target_policy": self.target_policy,
            "target_critic": self.target_critic,
        }
        return modules, {"policy_opt": self.policy_opt, "critic_opt": self.critic_opt}

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        tensors, meta = pack(*self._parts())
        meta["updates"] = self.updates
        return tensors, meta

    def load_state(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        unpack(tensors, meta, *self._parts(), self.device)
        self.updates = int(meta["updates"])
        self.state_loaded()
