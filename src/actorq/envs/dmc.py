"""DeepMind Control Suite tasks as Gymnasium environments: ``make_env("dmc:walker-stand")``.

Tassa et al., "DeepMind Control Suite" (2018). The id is ``dmc:<domain>-<task>`` with the
suite's own names (``dmc:cartpole-swingup``, ``dmc:ball_in_cup-catch``). Needs the ``[control]``
extra (dm-control 1.0.50 with mujoco 3.17.0; see pyproject.toml).

- Observations: the suite's observation dict, each entry flattened and concatenated in the
  order of the task's ``observation_spec()`` (an ordered dict, fixed per task), as float32.
- Actions: a Box with the task's action bounds; actions are clipped to them. Agents with a
  tanh policy output in [-1, 1] rescale to these bounds (``actorq.core.exploration``).
- ``action_repeat``: each action is applied that many physics control steps, rewards summed.
- Episodes end by the suite's time limit (1000 control steps), reported as ``truncated``; a
  step with discount 0 (a real termination, rare in the suite) as ``terminated``.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from actorq.envs.gym_family import keep_mujoco_log_off_disk
from actorq.errors import EnvIdError

CONTROL_EXTRA_HINT = "dmc: environments need the [control] extra: pip install 'actorq[control]'"


def _suite() -> Any:
    # We never render; without this dm_control probes for an OpenGL window system at import and
    # warns on every headless machine. Set MUJOCO_GL yourself (e.g. egl) to render.
    os.environ.setdefault("MUJOCO_GL", "disable")
    try:
        from dm_control import suite
    except ImportError as e:
        raise EnvIdError(f"{CONTROL_EXTRA_HINT} ({e})") from None
    keep_mujoco_log_off_disk()
    return suite


def parse_dmc_id(name: str) -> tuple[str, str]:
    """``"walker-stand"`` → ``("walker", "stand")``, validated against the suite."""
    suite = _suite()
    domains: dict[str, Any] = suite.TASKS_BY_DOMAIN
    domain, sep, task = name.partition("-")
    if domain not in domains:
        raise EnvIdError(
            f"unknown DeepMind Control domain {domain!r} in 'dmc:{name}'; "
            f"domains: {', '.join(sorted(domains))}"
        )
    tasks = sorted(domains[domain])
    if not sep or task not in tasks:
        raise EnvIdError(
            f"unknown task {task!r} of DeepMind Control domain {domain!r}; "
            f"its tasks: {', '.join(tasks)} (e.g. 'dmc:{domain}-{tasks[0]}')"
        )
    return domain, task


class DMCEnv(gym.Env[np.ndarray, np.ndarray]):
    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self, domain: str, task: str, action_repeat: int = 1) -> None:
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
        self._env = _suite().load(domain, task)
        self.domain, self.task, self.action_repeat = domain, task, action_repeat
        self._keys = list(self._env.observation_spec().keys())
        size = sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values())
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        spec = self._env.action_spec()
        self._low = spec.minimum.astype(np.float64)
        self._high = spec.maximum.astype(np.float64)
        self.action_space = gym.spaces.Box(
            self._low.astype(np.float32), self._high.astype(np.float32), dtype=np.float32
        )

    def _obs(self, ts: Any) -> np.ndarray:
        parts = [np.asarray(ts.observation[k], np.float32).reshape(-1) for k in self._keys]
        return np.concatenate(parts)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            # The task draws its initial state from its own RandomState: reseed that one (it
            # takes 32 bits; a resumed long run's or a large --seed's seeds pass 2**32)
            self._env.task.random.seed(seed % 2**32)
        return self._obs(self._env.reset()), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = np.clip(np.asarray(action, np.float64), self._low, self._high)
        reward = 0.0
        ts = None
        for _ in range(self.action_repeat):
            ts = self._env.step(a)
            reward += float(ts.reward or 0.0)
            if ts.last():
                break
        assert ts is not None
        terminated = bool(ts.last() and ts.discount == 0.0)
        truncated = bool(ts.last() and not terminated)
        return self._obs(ts), reward, terminated, truncated, {}

    def close(self) -> None:
        self._env.close()


def make_dmc_env(name: str, **kwargs: Any) -> DMCEnv:
    """``make_env("dmc:<domain>-<task>")``; ``kwargs``: ``action_repeat``."""
    return DMCEnv(*parse_dmc_id(name), **kwargs)
