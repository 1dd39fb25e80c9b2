"""The PPO update rule, readable top to bottom.

PPO (Schulman et al., "Proximal Policy Optimization Algorithms", 2017): several epochs of
minibatch gradient steps on the clipped surrogate objective, with a value loss and an entropy
bonus; advantages by GAE(λ) (Schulman et al., "High-Dimensional Continuous Control Using
Generalized Advantage Estimation", ICLR 2016). The details follow CleanRL's ``ppo.py`` and
``ppo_continuous_action.py`` (Huang et al., "The 37 Implementation Details of PPO", 2022):
advantage normalisation per minibatch, global gradient clipping, linear learning-rate
annealing, a value loss of ½·MSE (SB3's is MSE: the same ``vf_coef`` weighs it twice as much
there), and where ``PPOConfig`` turns them on, the clipped value loss and observation and
reward normalisation (off for Atari).

What is actorq's: the data comes from actors running a *quantized* snapshot, which is therefore
the behaviour policy. The ratio is ``exp(log π_θ(a|s) − log μ(a|s))`` with ``log μ`` the value
each actor recorded when it acted — not the learner's fp32 policy at that version — so the
quantization error (and, with ``max_policy_lag > 1``, the lag) is corrected like any
off-policyness, instead of being ignored. Values and advantages are computed here, by the fp32
value network (it never leaves the learner). Each batch is ``N`` chunks of ``T`` steps; GAE
runs along each chunk and bootstraps from ``V(next_obs)`` at the chunk's end and where a time
limit cut an episode.

The rule is the same for every ``PPOConfig.network`` (:func:`~actorq.agents.ppo.networks.
make_networks`): MLPs, or the chip macro placement networks (Mirhoseini et al., Nature 2021),
whose masked logits (illegal cells at -1e9) give those cells probability 0, so they add
nothing to the log-probabilities, the ratio or the entropy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from actorq.agents.optim import adam
from actorq.agents.ppo.config import PPOConfig
from actorq.agents.ppo.networks import make_networks, policy_and_value
from actorq.agents.state import pack, unpack
from actorq.agents.step import HOST_READS, TorchLearner, set_lr
from actorq.core.interfaces import Learner, MLPLearner
from actorq.types import Batch, EnvSpec


def gae(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """Advantages for ``(N, T)`` chunks of consecutive steps.

    ``δ_t = r_t + γ (1 − term_t) V(s'_t) − V(s_t)`` with ``s'_t`` the observation after step t
    (the episode's last one where it ended), and ``A_t = δ_t + γλ (1 − done_t) A_{t+1}``,
    ``A_T = 0``: an ended episode (terminated or truncated) does not pass credit to the next
    one; a truncated one still bootstraps from its last state.
    """
    delta = reward + gamma * (1.0 - terminated) * next_value - value
    carry = gamma * lam * (1.0 - np.maximum(terminated, truncated))
    adv = np.zeros_like(delta)
    last = np.zeros(delta.shape[0], delta.dtype)
    for t in range(delta.shape[1] - 1, -1, -1):
        last = delta[:, t] + carry[:, t] * last
        adv[:, t] = last
    return adv


class RunningMeanStd:
    """Running mean and variance (parallel algorithm of Chan et al., 1979), float64."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64).reshape(-1, *self.mean.shape)
        if not len(x):
            return
        b_mean, b_var, n = x.mean(axis=0), x.var(axis=0), len(x)
        delta, total = b_mean - self.mean, self.count + n
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + b_var * n + delta**2 * self.count * n / total
        self.var, self.count = m2 / total, total

    def std(self, eps: float = 1e-8) -> np.ndarray:
        return np.sqrt(self.var + eps)

    def state(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "var": self.var.tolist(), "count": self.count}

    def load(self, d: dict[str, Any]) -> None:
        self.mean = np.asarray(d["mean"], np.float64).reshape(self.mean.shape)
        self.var = np.asarray(d["var"], np.float64).reshape(self.var.shape)
        self.count = float(d["count"])


class PPOLearner(TorchLearner, Learner):
    def __init__(self, cfg: PPOConfig, spec: EnvSpec) -> None:
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        self.discrete = spec.discrete
        self.obs_shape = spec.observation.shape  # (obs_dim,), or pixels (C, H, W)
        self.network = cfg.network
        torch.manual_seed(cfg.seed)
        act_dim = spec.num_actions if spec.discrete else int(np.prod(spec.action.shape))
        policy, value = make_networks(cfg, spec)
        self.policy, self.value = policy.to(self.device), value.to(self.device)
        self.log_std = torch.nn.Parameter(
            torch.full((0 if spec.discrete else act_dim,), cfg.log_std_init, device=self.device)
        )
        params = [*self.policy.parameters(), *self.value.parameters()]
        if not spec.discrete:
            params.append(self.log_std)
        self.params = params  # what the optimizer steps and the gradient clip covers
        self.opt = adam(params, cfg.learning_rate, cfg.adam_eps)
        # the chip network reads raw features by position (its config refuses normalize_obs)
        self.normalize_obs = cfg.network != "chip" and resolve_auto(cfg.normalize_obs, spec)
        self.normalize_reward = resolve_auto(cfg.normalize_reward, spec)
        self.obs_rms = RunningMeanStd((spec.obs_dim,))
        self.ret_rms = RunningMeanStd(())
        self.consumed = 0  # env steps trained on (for learning-rate annealing)
        self.updates = 0
        self._first_ratio: list[torch.Tensor] = []
        self._lr = cfg.learning_rate  # the host's copy (a captured update's is a tensor)
        self.init_runner(cfg.learner_mode, [self.policy, self.value, self.log_std], [self.opt])

    # -- helpers ------------------------------------------------------------------------------
    def _t(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(x), device=self.device)

    def _norm_obs(self, obs: np.ndarray) -> np.ndarray:
        if not self.normalize_obs:  # pixels stay uint8 (the network scales them on its device)
            return obs if obs.dtype == np.uint8 else np.asarray(obs, np.float32)
        x = (obs - self.obs_rms.mean) / self.obs_rms.std()
        return np.clip(x, -self.cfg.obs_clip, self.cfg.obs_clip).astype(np.float32)

    def _scale_rewards(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Reward scaling by the std of the discounted return (CleanRL's NormalizeReward).
        Each chunk's returns start at 0 at its first step: within ~1/(1 − γ) steps they are
        the running returns an env wrapper would see."""
        if not self.normalize_reward:
            return reward
        g, ret = self.cfg.gamma, np.zeros(reward.shape[0], np.float64)
        rets = np.empty(reward.shape, np.float64)
        for t in range(reward.shape[1]):
            ret = ret * g + reward[:, t]
            rets[:, t] = ret
            ret = ret * (1.0 - done[:, t])
        self.ret_rms.update(rets)
        scaled = reward / self.ret_rms.std()
        return np.clip(scaled, -self.cfg.reward_clip, self.cfg.reward_clip).astype(np.float32)

    def _values(self, obs: np.ndarray, chunk: int = 4096) -> np.ndarray:
        """``V(obs)`` for ``(N, T, *obs_shape)`` observations, as ``(N, T)``, without gradients;
        in chunks of ``chunk`` states, so a large batch of a convolutional network (the chip
        value's canvas maps) does not hold every state's activations at once."""
        flat = obs.reshape(-1, *self.obs_shape)
        with torch.no_grad():
            parts = [
                self.value(self._t(flat[i : i + chunk])).reshape(-1).cpu().numpy()
                for i in range(0, len(flat), chunk)
            ]
        return np.concatenate(parts).reshape(obs.shape[: obs.ndim - len(self.obs_shape)])

    def _next_values(
        self, obs: np.ndarray, next_obs: np.ndarray, value: np.ndarray, terminated: np.ndarray
    ) -> np.ndarray:
        """``V(next_obs)`` as ``(N, T)``. For pixels, only where it is needed and not known
        already: a step's next observation is the chunk's next observation unless the episode
        ended there (checked, not assumed), and a terminated step does not bootstrap. That
        leaves the chunks' last steps and the truncations: a pixel rollout's second value pass
        shrinks from N·T states to ~N. Vector observations keep the plain pass (it is cheap,
        and their runs stay bit-identical to earlier versions)."""
        if obs.dtype != np.uint8:
            return self._values(next_obs)
        n, t = value.shape
        out = np.zeros_like(value)
        axes = tuple(range(2, obs.ndim))
        same = np.zeros((n, t), bool)
        same[:, :-1] = (next_obs[:, :-1] == obs[:, 1:]).all(axis=axes)
        out[:, :-1][same[:, :-1]] = value[:, 1:][same[:, :-1]]
        need = ~same & (terminated == 0)
        if need.any():
            out[need] = self._values(next_obs[need][:, None]).reshape(-1)
        return out

    def _dist(self, out: torch.Tensor) -> torch.distributions.Distribution:
        """The action distribution for the policy network's output ``out``."""
        # no argument validation: it reads a bool from the device per call (a sync, and
        # illegal inside a CUDA graph); the inputs are the learner's own tensors
        if self.discrete:
            return torch.distributions.Categorical(logits=out, validate_args=False)
        return torch.distributions.Normal(
            out, self.log_std.exp().expand_as(out), validate_args=False
        )

    def _log_prob_entropy(
        self, out: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        d = self._dist(out)
        if self.discrete:
            return d.log_prob(action.long()), d.entropy()
        return d.log_prob(action).sum(-1), d.entropy().sum(-1)

    # -- the update ---------------------------------------------------------------------------
    def learn(self, batch: Batch) -> None:
        """One PPO update on a rollout: GAE on the host, then the minibatch epochs on the
        device, their metrics kept there until :meth:`read_metrics`."""
        cfg = self.cfg
        n, t = batch["reward"].shape
        obs = self._norm_obs(batch["obs"])
        next_obs = self._norm_obs(batch["next_obs"])
        done = np.maximum(batch["terminated"], batch["truncated"])
        reward = self._scale_rewards(batch["reward"], done)
        value = self._values(obs)
        next_value = self._next_values(obs, next_obs, value, batch["terminated"])
        adv = gae(
            reward,
            value,
            next_value,
            batch["terminated"],
            batch["truncated"],
            cfg.gamma,
            cfg.gae_lambda,
        )
        ret = adv + value

        # flatten (N, T) -> N*T
        b_obs = self._t(obs.reshape(n * t, *self.obs_shape))
        b_act = self._t(batch["action"].reshape(n * t, *batch["action"].shape[2:]))
        b_logp = self._t(batch["log_prob"].reshape(-1))
        b_adv, b_ret = self._t(adv.reshape(-1)), self._t(ret.reshape(-1))
        b_val = self._t(value.reshape(-1))

        if cfg.anneal_lr:
            frac = max(0.0, 1.0 - self.consumed / (cfg.anneal_steps or cfg.total_steps))
            self._lr = frac * cfg.learning_rate
            set_lr(self.opt, self._lr)
        self.consumed += n * t

        size = n * t
        mb = min(cfg.minibatch_size, size)
        first_ratio_dev: torch.Tensor | None = None
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(size, device=self.device)
            for start in range(0, size - mb + 1, mb):
                idx = perm[start : start + mb]
                m = self.runner(
                    {
                        "obs": b_obs[idx],
                        "action": b_act[idx],
                        "log_prob": b_logp[idx],
                        "adv": b_adv[idx],
                        "ret": b_ret[idx],
                        "value": b_val[idx],
                    }
                )
                if first_ratio_dev is None:
                    # before any step: how far the learner's fp32 policy is from what
                    # the actors ran (quantization, and lag when max_policy_lag > 1)
                    first_ratio_dev = m["quant/first_ratio_abs_dev"].clone()
                self.metrics.add(m)
            # an early stop reads the last KL (one sync per epoch, only when asked for)
            if cfg.target_kl is not None and float(m["losses/approx_kl"]) > cfg.target_kl:
                break

        if self.normalize_obs:  # after the update: the next snapshot carries the new stats
            self.obs_rms.update(batch["obs"].reshape(n * t, -1))
        self.updates += 1
        var_y = float(np.var(ret))
        explained = float("nan") if var_y == 0 else 1.0 - float(np.var(ret - value)) / var_y
        version_lag = float(np.mean(batch["version"].max() - batch["version"]))
        self.metrics.add_host(
            {
                "losses/explained_variance": explained,
                "losses/learning_rate": self._lr,
                "charts/version_spread": version_lag,
            }
        )
        if first_ratio_dev is not None:
            self._first_ratio.append(first_ratio_dev)

    def step(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One minibatch gradient step on tensors already on the device; returns metric
        tensors (no sync)."""
        cfg = self.cfg
        out, new_v = policy_and_value(self.policy, self.value, b["obs"])
        new_logp, entropy = self._log_prob_entropy(out, b["action"])
        new_v = new_v.reshape(-1)
        logratio = new_logp - b["log_prob"]
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
            ratio_dev = (ratio - 1.0).abs().mean()
        mb_adv = b["adv"]
        if cfg.norm_adv and len(mb_adv) > 1:
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
        pg_loss = torch.max(
            -mb_adv * ratio,
            -mb_adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef),
        ).mean()
        ret, old_v = b["ret"], b["value"]
        if cfg.clip_vloss:
            v_clipped = old_v + torch.clamp(new_v - old_v, -cfg.clip_coef, cfg.clip_coef)
            v_loss = 0.5 * torch.max((new_v - ret) ** 2, (v_clipped - ret) ** 2).mean()
        else:
            v_loss = 0.5 * ((new_v - ret) ** 2).mean()
        ent = entropy.mean()
        loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        self.opt.step()
        return {
            "losses/policy_loss": pg_loss.detach(),
            "losses/value_loss": v_loss.detach(),
            "losses/entropy": ent.detach(),
            "losses/approx_kl": approx_kl,
            "losses/clipfrac": clipfrac,
            "quant/first_ratio_abs_dev": ratio_dev,
        }

    def read_metrics(self) -> dict[str, float]:
        out = self.metrics.read()
        if self._first_ratio:  # the per-rollout first minibatch's, not every minibatch's
            HOST_READS[0] += 1
            out["quant/first_ratio_abs_dev"] = float(torch.stack(self._first_ratio).mean())
            self._first_ratio.clear()
        else:
            out.pop("quant/first_ratio_abs_dev", None)
        return out

    # -- what actors get ----------------------------------------------------------------------
    def is_finite(self) -> bool:
        """Whether every weight of the acting policy is a finite number."""
        params = [*self.policy.parameters(), self.log_std]
        return all(bool(torch.isfinite(p).all()) for p in params)

    # -- checkpointing ------------------------------------------------------------------------
    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        tensors, meta = pack({"policy": self.policy, "value": self.value}, {"opt": self.opt})
        tensors["log_std"] = self.log_std.detach().cpu().clone()
        meta.update(
            network=self.network,
            updates=self.updates,
            consumed=self.consumed,
            obs_rms=self.obs_rms.state(),
            ret_rms=self.ret_rms.state(),
        )
        return tensors, meta

    def load_state(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        saved = meta.get("network", "mlp")  # checkpoints from before --network are MLPs
        if saved != self.network:
            raise ValueError(
                f"the checkpoint holds a {saved!r} network, this run a {self.network!r}"
            )
        unpack(
            {k: v for k, v in tensors.items() if k != "log_std"},
            meta,
            {"policy": self.policy, "value": self.value},
            {"opt": self.opt},
            self.device,
        )
        with torch.no_grad():
            self.log_std.copy_(tensors["log_std"].to(self.device))
        self.updates = int(meta["updates"])
        self.consumed = int(meta["consumed"])
        self.obs_rms.load(meta["obs_rms"])
        self.ret_rms.load(meta["ret_rms"])
        self.state_loaded()


class MLPPPOLearner(PPOLearner, MLPLearner):
    """PPO with ``--network mlp``: the policy MLP's layers (and the extras its snapshot needs)
    for the quantizer. The chip network is a plain :class:`PPOLearner`: ChipPolicyIO exports
    it whole."""

    def policy_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.policy.export_layers()  # type: ignore[operator]

    def policy_extras(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        if self.normalize_obs:
            out["obs_mean"] = self.obs_rms.mean.astype(np.float32)
            out["obs_std"] = self.obs_rms.std().astype(np.float32)
        if not self.discrete:
            out["log_std"] = self.log_std.detach().cpu().numpy().astype(np.float32)
        return out


def resolve_auto(flag: bool | None, spec: EnvSpec) -> bool:
    """``None`` (auto): on for continuous actions, off for discrete ones."""
    return (not spec.discrete) if flag is None else bool(flag)
