"""A run's trained policy, ready to use: what ``Model.load`` gives a Stable-Baselines3 user.

    import actorq

    policy = actorq.load("runs/dqn-CartPole-v1-int8-s0", precision="int8")
    action = policy.predict(obs)                 # one observation, or a batch of them
    returns = policy.evaluate(episodes=10)       # episodes on fresh seeds, as `actorq eval`
    policy.export("cartpole.onnx")               # a standalone ONNX model (input obs)

The policy is the run's last checkpoint, quantized to ``precision`` exactly as its actors ran
it (default: the run's precision), computed by the same runtime (onnxruntime by default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from actorq.agents import builder_for
from actorq.config import ExperimentConfig
from actorq.core.exploration import PolicySampler, to_env_action
from actorq.errors import ActorQError, short, shown
from actorq.output import check_output, write_output
from actorq.quant.heads import Head
from actorq.quant.runtimes import (
    ModelRuntime,
    PolicyRuntime,
    decode_snapshot,
    make_runtime,
    snapshot_head,
    to_onnx,
)
from actorq.quant.snapshot import PolicySnapshot
from actorq.run.directory import load_run_policy
from actorq.rundir import RunDir


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
        self.precision: str = cfg.precision if precision is None else precision
        self.run_dir = Path(run_dir)
        self._io, self._data = io, data
        self._runtime: PolicyRuntime | ModelRuntime | None = None
        self._head: Head
        self._obs_shape: tuple[int, ...] = ()
        self._pixels = False
        self._bounds: tuple[np.ndarray, np.ndarray] | None = None
        self._sampler: PolicySampler | None = None
        self._sampler_seed = 0

    def _acting(self) -> PolicyRuntime | ModelRuntime:
        """The runtime :meth:`predict` runs: an MLP snapshot's in the run's runtime, a whole
        model's (pixels, chip placement) in onnxruntime, as the actors run them."""
        if self._runtime is None:
            try:
                snap = decode_snapshot(self._data)
            except ActorQError:  # GO's graph network: its input is a graph, not an observation
                raise ActorQError(
                    f"predict() takes observations; {shown(self.run_dir)} is a "
                    f"{self.config.agent} run whose policy takes a graph (use evaluate(), "
                    "export(), or actorq graphopt place)"
                ) from None
            self._head = snapshot_head(snap)
            if isinstance(snap, PolicySnapshot):
                self._runtime = make_runtime(snap, self.config.runtime)
                self._obs_shape, self._pixels = (snap.spec.obs_dim,), False
            else:
                model = make_runtime(snap)  # a whole model runs in onnxruntime
                self._runtime = model
                self._obs_shape, self._pixels = model.obs_shape, model.obs_dtype == np.uint8
        return self._runtime

    def _observations(self, obs: Any) -> tuple[np.ndarray, bool]:
        """``obs`` as a batch the runtime takes, and whether it was one observation; one
        :class:`ActorQError` line for anything else (wrong shape, not numbers, NaN or Inf,
        pixels outside a byte's range)."""
        shape = self._obs_shape
        try:
            x = np.asarray(obs)
        except (ValueError, TypeError):  # ragged nesting
            raise ActorQError(
                "predict: observations must be a rectangular array of numbers"
            ) from None
        if x.dtype.kind not in "biuf":
            raise ActorQError(f"predict: observations must be numbers, got dtype {x.dtype}")
        if x.ndim not in (len(shape), len(shape) + 1) or x.shape[x.ndim - len(shape) :] != shape:
            raise ActorQError(
                f"predict: one observation of shape {shape} or a batch (n, "
                f"{', '.join(map(str, shape))}), got {x.shape}"
            )
        if self._pixels:
            if x.dtype != np.uint8 and not ((x >= 0) & (x <= 255) & (x == np.floor(x))).all():
                raise ActorQError("predict: pixels are bytes: whole numbers in [0, 255]")
            x = x.astype(np.uint8, copy=False)
        else:
            with np.errstate(over="ignore"):  # a float64 past float32's range: refused below
                x = x.astype(np.float32, copy=False)
            if not np.isfinite(x).all():  # also a float64 past float32's range
                raise ActorQError("predict: observations hold NaN or Inf (as float32)")
        single = x.ndim == len(shape)
        return (x[None] if single else x), single

    def predict(self, obs: np.ndarray, deterministic: bool = True, seed: int = 0) -> np.ndarray:
        """The policy's action for ``obs`` (one observation, or a batch ``(n, *obs_shape)``;
        Atari: ``(4, 84, 84)`` uint8 stacks), as the environment takes it: an index for
        discrete actions, an array in the action space's bounds for continuous ones.
        ``deterministic``: the greedy action (argmax, or a Gaussian's mean); otherwise sampled
        from a stochastic policy (PPO), calls with one ``seed`` drawing from one stream (a
        call with another seed starts that seed's)."""
        if not deterministic and not (
            isinstance(seed, int | np.integer) and not isinstance(seed, bool) and 0 <= seed < 2**63
        ):
            raise ActorQError(f"predict: seed must be a whole number >= 0, got {short(seed)}")
        runtime = self._acting()
        x, single = self._observations(obs)
        out = runtime(x)
        head = self._head
        if deterministic or not head.stochastic:
            action = head.greedy(out)
        else:
            if self._sampler is None or seed != self._sampler_seed:
                self._sampler, self._sampler_seed = PolicySampler(seed), seed
                self._sampler.set_snapshot(decode_snapshot(self._data))
            action = self._sampler.act(out)[0]
        if not head.discrete:
            if self._bounds is None:
                self._bounds = action_bounds(self.config)
            # as the actors do: a stochastic policy's samples may leave [-1, 1]
            action = to_env_action(np.clip(action, -1.0, 1.0), *self._bounds)
        return action[0] if single else action

    def evaluate(self, episodes: int = 10, seed: int = 20_000) -> np.ndarray:
        """Returns of ``episodes`` episodes on environments seeded ``seed``, ``seed + 1``,
        ...: what ``actorq eval`` prints (greedy; Atari samples, as its evaluations do)."""
        check_evaluation(episodes, seed)
        return np.asarray(self._io.evaluate(self._data, episodes, seed))

    def export(self, path: str | Path, force: bool = False) -> Path:
        """Write the policy as a standalone ONNX model (what ``actorq export`` writes: input
        ``obs``); an existing file is replaced only with ``force``, never a non-regular one."""
        out = export_path(self.run_dir, path, "export", force, "force=True")
        write_output(out, policy_onnx(self._data, self.config)[0], "export")
        return out

    def __repr__(self) -> str:
        return (
            f"TrainedPolicy({str(self.run_dir)!r}, agent={self.config.agent}, "
            f"env={self.config.env}, precision={self.precision})"
        )


def export_path(
    run_dir: str | Path, path: str | Path, flag: str, force: bool, force_name: str
) -> Path:
    """:func:`~actorq.output.check_output` for an exported policy, which never replaces what
    its run writes (``--force`` on ``RUN/config.json`` left no run; an earlier export beside
    the run's files is the user's, replaced with ``--force`` as anywhere)."""
    out = check_output(path, flag, force=force, force_name=force_name)
    if RunDir(Path(run_dir)).owns(out):
        raise ActorQError(
            f"{flag} {shown(out)} is where the run {shown(run_dir)} writes its own files"
        )
    return out


def action_bounds(cfg: ExperimentConfig) -> tuple[np.ndarray, np.ndarray]:
    """The run's continuous action space's ``(low, high)``."""
    es = builder_for(cfg).env_spec(cfg)
    return np.asarray(es.action_low, np.float32), np.asarray(es.action_high, np.float32)


def check_evaluation(episodes: object, seed: object, dashes: str = "") -> None:
    """One :class:`ActorQError` line unless ``episodes`` is a whole number in [1, 100000] and
    ``seed`` one in [0, 2**32 - 1 - episodes] (environments take 32-bit seeds, one per
    episode): what :meth:`TrainedPolicy.evaluate` and ``actorq eval`` (``dashes="--"``) take."""
    if not _whole(episodes) or not 1 <= episodes <= 100_000:
        raise ActorQError(f"{dashes}episodes must be in [1, 100000], got {short(episodes)}")
    if not _whole(seed) or not 0 <= seed <= 2**32 - 1 - episodes:
        raise ActorQError(f"{dashes}seed must be in [0, 2**32 - 1 - episodes], got {short(seed)}")


def _whole(x: object) -> TypeGuard[int | np.integer]:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def policy_onnx(data: bytes, cfg: ExperimentConfig) -> tuple[bytes, str, str]:
    """A checkpointed policy's snapshot bytes (of the run ``cfg``) as a standalone ONNX model:
    ``(model, precision, what its inputs and outputs are)``. An MLP policy's model has two
    outputs: ``out``, the network's (action values, logits, or an action in [-1, 1]), and
    ``action``, the greedy action as the environment takes it (:meth:`TrainedPolicy.predict`'s):
    an index, or ``out`` clipped and mapped to the action space's bounds (a deployed [-1, 1]
    action would be a fraction of the torque meant)."""
    from actorq.quant.model_snapshot import ModelSnapshot

    try:
        snap = PolicySnapshot.from_bytes(data)
    except ActorQError:  # a policy exported whole (GO's graph network, the chip network)
        model = ModelSnapshot.from_bytes(data)
        return model.model, model.precision, f"a {model.kind} policy"
    head = snapshot_head(snap)
    bounds = None if head.discrete else action_bounds(cfg)
    model_bytes, rule = with_action(to_onnx(snap), bounds)
    return model_bytes, snap.precision, f"input 'obs', outputs 'out' and 'action' ({rule})"


def with_action(
    model_bytes: bytes, bounds: tuple[np.ndarray, np.ndarray] | None
) -> tuple[bytes, str]:
    """``model_bytes`` (output ``out``) with a second output, ``action``: ``argmax(out)`` for
    discrete actions (``bounds`` None), else ``low + (clip(out, -1, 1) + 1) / 2 * (high -
    low)`` (:func:`~actorq.core.exploration.to_env_action`); and the rule, also kept in the
    model's metadata (``actorq.action``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load_from_string(model_bytes)
    g = model.graph
    if bounds is None:
        rule = "argmax of out"
        g.node.append(helper.make_node("ArgMax", ["out"], ["action"], axis=1, keepdims=0))
        g.output.append(helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"]))
    else:
        low, high = (np.asarray(b, np.float32) for b in bounds)
        rule = f"out clipped to [-1, 1], mapped to [{short(low.tolist())}, {short(high.tolist())}]"
        for name, arr in (
            ("action_m1", np.float32(-1.0)),
            ("action_p1", np.float32(1.0)),
            ("action_half", (0.5 * (high - low)).astype(np.float32)),
            ("action_low", low),
        ):
            g.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
        g.node.extend(
            [
                helper.make_node("Clip", ["out", "action_m1", "action_p1"], ["action_c"]),
                helper.make_node("Add", ["action_c", "action_p1"], ["action_1"]),
                helper.make_node("Mul", ["action_1", "action_half"], ["action_s"]),
                helper.make_node("Add", ["action_s", "action_low"], ["action"]),
            ]
        )
        n = int(low.shape[0])
        g.output.append(helper.make_tensor_value_info("action", TensorProto.FLOAT, ["batch", n]))
    helper.set_model_props(model, {"actorq.action": rule})
    return model.SerializeToString(), rule


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
