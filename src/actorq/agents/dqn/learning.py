"""The DQN update rule, readable top to bottom.

DQN (Mnih et al., "Human-level control through deep reinforcement learning", Nature 2015):
Q-learning with a replay buffer and a periodically copied target network, trained with the
Huber loss. Double DQN (van Hasselt, Guez & Silver, AAAI 2016): the online network picks the
next action, the target network values it. Targets are n-step: the adder already summed the
rewards and folded gamma^n (or 0 at termination) into ``discount``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from actorq.agents.dqn.config import DQNConfig
from actorq.agents.dqn.networks import MLP, make_q_network
from actorq.agents.optim import adam
from actorq.agents.state import pack, unpack
from actorq.agents.step import TorchLearner, copy_params_
from actorq.core.interfaces import MLPLearner
from actorq.types import EnvSpec


class DQNLearner(TorchLearner, MLPLearner):
    def __init__(self, cfg: DQNConfig, spec: EnvSpec) -> None:
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        torch.manual_seed(cfg.seed)
        # an MLP, or the Nature-CNN for pixels (uint8 batches, /255 on this device)
        self.q = make_q_network(spec, cfg.hidden, cfg.dueling)
        self.q.to(self.device)
        self.target = copy.deepcopy(self.q)
        self.target.requires_grad_(False)
        self.opt = adam(self.q.parameters(), cfg.learning_rate, cfg.adam_eps)
        self.updates = 0
        self.init_runner(cfg.learner_mode, [self.q], [self.opt])

    def step(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One update on a batch already on the device; returns metric tensors (no sync)."""
        cfg = self.cfg
        q = self.q(b["obs"]).gather(1, b["action"].long()[:, None]).squeeze(1)
        with torch.no_grad():
            q_next_target = self.target(b["next_obs"])
            if cfg.double_q:
                a_next = self.q(b["next_obs"]).argmax(1, keepdim=True)
                v_next = q_next_target.gather(1, a_next).squeeze(1)
            else:
                v_next = q_next_target.max(1).values
            y = b["reward"] + b["discount"] * v_next
        loss = F.huber_loss(q, y, delta=cfg.huber_delta)

        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.q.parameters(), cfg.max_grad_norm)
        self.opt.step()
        return {
            "losses/td_loss": loss.detach(),
            "losses/q_values": q.detach().mean(),
            "losses/grad_norm": grad_norm.detach(),
        }

    def after_step(self) -> None:
        self.updates += 1
        if self.updates % self.cfg.target_update_period == 0:
            copy_params_(self.target, self.q)

    def policy_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        if not isinstance(self.q, MLP):  # the CNN is exported whole (agents/pixels.py)
            raise TypeError("a convolutional Q-network has no MLP layers")
        return self.q.export_layers()

    # -- checkpointing: tensors go to safetensors, the rest to JSON ---------------------------
    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        tensors, meta = pack({"q": self.q, "target": self.target}, {"opt": self.opt})
        meta["updates"] = self.updates
        return tensors, meta

    def load_state(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        if "opt_steps" in meta:  # checkpoints written before agents shared agents/state.py
            meta = {
                **meta,
                "optimizers": {"opt": {"steps": meta["opt_steps"], "groups": meta["opt_groups"]}},
            }
        unpack(tensors, meta, {"q": self.q, "target": self.target}, {"opt": self.opt}, self.device)
        self.updates = int(meta["updates"])
        self.state_loaded()
