"""PPO's ``--network chip``: how the loop snapshots, evaluates and compares the macro placement
policy (Mirhoseini et al., "A graph placement methodology for fast chip design", Nature 594,
2021; google-research/circuit_training) that :class:`~actorq.agents.ppo.learning.PPOLearner`
trains with PPO (Schulman et al., 2017).

The policy is not an MLP, so it is not quantized layer by layer: each publish exports the whole
network to ONNX at the run's precision (:func:`actorq.agents.ppo.chip_networks.chip_policy_onnx`:
GraphSAGE in int8; the canvas head's convolutions, input and output layers fp32) and wraps
it in a :class:`~actorq.quant.model_snapshot.ModelSnapshot` of kind
:data:`~actorq.quant.runtimes.OBS_LOGITS`, which every actor (:class:`actorq.core.loop.
VectorActor`) decodes, validates and runs in onnxruntime, sampling from the masked logits and
recording the log-probability PPO's ratio is taken against.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from actorq.agents.policy_io import Comparison, compare_policies
from actorq.agents.ppo.chip_networks import ChipPolicy, chip_policy_onnx
from actorq.agents.ppo.config import PPOConfig
from actorq.agents.ppo.learning import PPOLearner
from actorq.chip.env import ChipPlacementEnv
from actorq.envs import make_env
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.runtimes import OBS_LOGITS, ModelRuntime, decode_snapshot, make_runtime


def chip_snapshot(policy: ChipPolicy, version: int, precision: str, env_id: str) -> ModelSnapshot:
    """``policy`` exported at ``precision`` (fp32 or int8) as an :data:`OBS_LOGITS` snapshot."""
    was = policy.training
    # the exporter reads weights with .numpy(): export a CPU copy of a GPU learner's policy
    model = (
        policy if next(policy.parameters()).device.type == "cpu" else copy.deepcopy(policy).cpu()
    )
    model.eval()
    try:
        data = chip_policy_onnx(model, precision)
    finally:
        policy.train(was)
    meta = {
        "obs_dim": int(model.obs_dim),
        "num_actions": int(model.rows * model.cols),
        "env": env_id,
        "macros": int(model.n),
        "grid": [int(model.rows), int(model.cols)],
    }
    return ModelSnapshot(version, precision, OBS_LOGITS, data, meta)


def runtime_of(data: bytes, threads: int = 1) -> ModelRuntime:
    """The actors' runtime for chip snapshot bytes (decoded and validated as actors do)."""
    snap = decode_snapshot(data)
    if not isinstance(snap, ModelSnapshot):
        raise ValueError("not a chip policy snapshot (an MLP PolicySnapshot)")
    return make_runtime(snap, "ort", threads)


def greedy_placement(runtime: ModelRuntime, env: ChipPlacementEnv) -> tuple[float, dict[str, Any]]:
    """One episode with the argmax cell at every step: ``(return, last step's info)``; the
    return is ``-proxy`` (``info["costs"]`` has its terms) or ``-infeasible_penalty``.

    The environment has no randomness (macros go in a fixed order to cell centres, and the
    force-directed placer of the soft macros is seeded by its config), so this is *the* greedy
    placement of the policy: one episode says all that more would.
    """
    obs, info = env.reset(seed=0)
    total = 0.0
    while True:
        logits = runtime(obs[None])
        obs, reward, term, trunc, info = env.step(int(logits[0].argmax()))
        total += float(reward)
        if term or trunc:
            return total, info


class ChipPolicyIO:
    """:class:`~actorq.agents.policy_io.PolicyIO` of PPO with ``--network chip``: snapshots are
    :func:`chip_snapshot`; an evaluation is the greedy placement (:func:`greedy_placement`,
    return ``-proxy``) with the actors' runtime; quantized vs fp32 is compared on replay's
    states (share of equal greedy cells, and the mean |log π_int8(a|s) − log π_fp32(a|s)| for a
    sampled from the int8 policy, the one the actors ran)."""

    def __init__(self, cfg: PPOConfig, learner: PPOLearner) -> None:
        if not isinstance(learner.policy, ChipPolicy):
            raise TypeError("ChipPolicyIO needs a learner built with --network chip")
        self.cfg, self.learner = cfg, learner
        self.policy: ChipPolicy = learner.policy
        self.eval_label = "greedy placement, -proxy cost (deterministic: 1 episode)"
        self._env: ChipPlacementEnv | None = None
        #: ``info`` of the latest evaluation's last step (``costs``: the proxy's terms)
        self.last_info: dict[str, Any] = {}

    @property
    def env(self) -> ChipPlacementEnv:
        """The evaluation environment (with the force-directed placer), made once."""
        if self._env is None:
            env = make_env(self.cfg.env, **self.cfg.env_kwargs())
            assert isinstance(env, ChipPlacementEnv)
            self._env = env
        return self._env

    def is_finite(self) -> bool:
        return self.learner.is_finite()

    def snapshot(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> bytes:
        # calibration states do not apply: the int8 layers quantize activations per row at run
        # time and the weights per output column, rounded to nearest (PPOConfig.uses_gptq)
        with torch.no_grad():
            return chip_snapshot(self.policy, version, precision, self.cfg.env).to_bytes()

    def place(
        self, data: bytes, env: ChipPlacementEnv | None = None
    ) -> tuple[float, dict[str, Any]]:
        """The greedy placement of the snapshot ``data`` (:func:`greedy_placement` with the
        actors' runtime) in ``env``, default the evaluation env: ``(return, last step's
        info)``; ``env.pc`` then holds the placement, soft macros placed by the env's FD.
        :meth:`evaluate` and ``actorq chip place --method policy`` both place with this."""
        return greedy_placement(runtime_of(data, self.cfg.actor_threads), env or self.env)

    def evaluate(self, data: bytes, episodes: int, seed: int) -> np.ndarray:
        """``[-proxy]`` of the greedy placement (deterministic: ``episodes`` and ``seed`` do
        not apply)."""
        ret, self.last_info = self.place(data)
        return np.array([ret])

    def compare(
        self, quant: bytes, fp32: bytes, states: np.ndarray | None, seed: int
    ) -> Comparison:
        if states is None:
            states = np.zeros((0, self.policy.obs_dim), np.float32)
        a, b = decode_snapshot(quant), decode_snapshot(fp32)
        agree, _, gap = compare_policies(a, b, states, self.cfg.envs_per_actor, seed)
        return Comparison(agree, len(states), "replay states", None, gap)

    def summary_rows(self, data: bytes) -> list[tuple[str, str]]:
        return []  # the evaluation's return is -proxy, the cost its users read
