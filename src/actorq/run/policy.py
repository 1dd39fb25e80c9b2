"""A run's trained policy, ready to use: what ``Model.load`` gives a Stable-Baselines3 user.

    import actorq

    policy = actorq.load("runs/dqn-CartPole-v1-int8-s0", precision="int8")
    action = policy.predict(obs)                 # one observation, or a batch of them
    returns = policy.evaluate(episodes=10)       # greedy episodes on fresh seeds
    policy.export("cartpole.onnx")               # a standalone ONNX model (input obs)

The policy is the run's last checkpoint, quantized to ``precision`` exactly as its actors ran
it (default: the run's precision), computed by the same runtime (onnxruntime by default).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actorq.agents import builder_for
from actorq.core.exploration import PolicySampler, to_env_action
from actorq.errors import ActorQError, shown
from actorq.output import check_output, write_output
from actorq.quant.runtimes import PolicyRuntime, make_runtime, to_onnx
from actorq.quant.snapshot import PolicySnapshot
from actorq.run.directory import load_run_policy


class TrainedPolicy:
    """A run's policy at one precision: :meth:`predict`, :meth:`evaluate`, :meth:`export`.
    Load one with :func:`actorq.load`."""

    def __init__(
        self,
        run_dir: str | Path,
        precision: str | None = None,
        runtime: str | None = None,
        which: str = "latest",
    ) -> None:
        cfg, io, data = load_run_policy(str(run_dir), precision, runtime, which=which)
        self.config = cfg
        """The run's config (``config.json``, validated)."""
        self.precision: str = precision or cfg.precision
        self.run_dir = Path(run_dir)
        self._io, self._data = io, data
        self._runtime: PolicyRuntime | None = None
        self._bounds: tuple[np.ndarray, np.ndarray] | None = None
        self._sampler: PolicySampler | None = None

    def _mlp_runtime(self) -> PolicyRuntime:
        if self._runtime is None:
            try:
                snap = PolicySnapshot.from_bytes(self._data)
            except ActorQError:
                raise ActorQError(
                    f"predict() runs the MLP policies of dqn, d4pg and ppo; {shown(self.run_dir)} "
                    f"is a {self.config.agent} run whose policy is exported whole (use evaluate(), "
                    "export(), or its own command: actorq graphopt place / actorq chip place)"
                ) from None
            self._runtime = make_runtime(snap, self.config.runtime)
        return self._runtime

    def predict(self, obs: np.ndarray, deterministic: bool = True, seed: int = 0) -> np.ndarray:
        """The policy's action for ``obs`` (one observation, or a batch ``(n, obs_dim)``), as
        the environment takes it: an index for discrete actions, an array in the action
        space's bounds for continuous ones. ``deterministic``: the greedy action (argmax, or a
        Gaussian's mean); otherwise sampled from a stochastic policy (PPO) with ``seed``."""
        runtime = self._mlp_runtime()
        spec = runtime.spec
        x = np.asarray(obs, np.float32)
        single = x.ndim == 1
        if x.shape[-1:] != (spec.obs_dim,) or x.ndim not in (1, 2):
            raise ActorQError(
                f"predict: observations of shape (obs_dim,) or (n, obs_dim) with obs_dim "
                f"{spec.obs_dim}, got {x.shape}"
            )
        out = runtime(x[None] if single else x)
        head = spec.policy_head
        if deterministic or not head.stochastic:
            action = head.greedy(out)
        else:
            if self._sampler is None:
                self._sampler = PolicySampler(seed)
                self._sampler.set_snapshot(PolicySnapshot.from_bytes(self._data))
            action = self._sampler.act(out)[0]
        if not head.discrete:
            if self._bounds is None:
                es = builder_for(self.config).env_spec(self.config)  # the env's bounds
                self._bounds = (
                    np.asarray(es.action_low, np.float32),
                    np.asarray(es.action_high, np.float32),
                )
            # as the actors do: a stochastic policy's samples may leave [-1, 1]
            action = to_env_action(np.clip(action, -1.0, 1.0), *self._bounds)
        return action[0] if single else action

    def evaluate(self, episodes: int = 10, seed: int = 20_000) -> np.ndarray:
        """Returns of ``episodes`` greedy episodes on environments seeded ``seed``, ``seed +
        1``, ...: what ``actorq eval`` prints."""
        if not 1 <= episodes <= 100_000:
            raise ActorQError(f"episodes must be in [1, 100000], got {episodes}")
        return np.asarray(self._io.evaluate(self._data, episodes, seed))

    def export(self, path: str | Path, force: bool = False) -> Path:
        """Write the policy as a standalone ONNX model (what ``actorq export`` writes: input
        ``obs``); an existing file is replaced only with ``force``, never a non-regular one."""
        out = check_output(path, "export", force=force)
        write_output(out, policy_onnx(self._data)[0], "export")
        return out

    def __repr__(self) -> str:
        return (
            f"TrainedPolicy({str(self.run_dir)!r}, agent={self.config.agent}, "
            f"env={self.config.env}, precision={self.precision})"
        )


def policy_onnx(data: bytes) -> tuple[bytes, str, str]:
    """A checkpointed policy's snapshot bytes as a standalone ONNX model: ``(model, precision,
    what its inputs and outputs are)``."""
    from actorq.quant.model_snapshot import ModelSnapshot

    try:
        snap = PolicySnapshot.from_bytes(data)
        return to_onnx(snap), snap.precision, "input 'obs', output 'out'"
    except ActorQError:  # a policy exported whole (GO's graph network, the chip network)
        model = ModelSnapshot.from_bytes(data)
        return model.model, model.precision, f"a {model.kind} policy"


def load(
    run_dir: str | Path,
    precision: str | None = None,
    runtime: str | None = None,
    which: str = "latest",
) -> TrainedPolicy:
    """The trained policy of ``run_dir`` (``actorq train ... --run-dir``) at ``precision``
    (default: the run's), computed by ``runtime`` (default: the run's, onnxruntime);
    ``which``: the ``"latest"`` checkpoint or the ``"best"`` policy its evaluations kept."""
    return TrainedPolicy(run_dir, precision, runtime, which)
