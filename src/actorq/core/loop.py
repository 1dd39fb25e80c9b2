"""The actor's environment loop: K environments, one batched inference per step.

Used as-is in the synchronous single-process mode, inside every local actor process and inside
every Ray actor: :meth:`VectorActor.from_config` is the one place an actor is built, from the
plain data :meth:`ActorSetup.actor_config` writes (the one place an actor's config is written).
numpy, gymnasium and onnxruntime only — never torch.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from actorq.core.exploration import Behaviour, make_behaviour, to_env_action
from actorq.core.interfaces import Actor, ParameterSource
from actorq.core.seeds import clear_of_evaluations
from actorq.envs import GAME_OVER, SCORE, make_vector_env
from actorq.errors import SnapshotError, first_line
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.runtimes import ModelRuntime, PolicyRuntime, decode_snapshot, make_runtime
from actorq.registry import load
from actorq.replay.adders import NStepAdder, TrajectoryAdder
from actorq.replay.frames import FrameAdder
from actorq.replay.specs import AdderSpec, GateSpec, adder_from_json
from actorq.types import Batch, EnvSpec


def actor_seed(base: int, slot: int, incarnation: int = 0, envs: int = 1) -> int:
    """The one rule for actor seeds: slot 0 is the in-process actor (``actors=0``), slot
    ``i + 1`` actor process ``i``; each restart (incarnation) gets fresh seeds, so a restarted
    actor does not replay its history. ``base + 1000 * slot + 7919 * incarnation``, unless the
    actor's ``envs`` environments would then take seeds the evaluations use (slot 10 of seed
    0 would train on the periodic evaluation's episodes): those are moved past them
    (:func:`~actorq.core.seeds.clear_of_evaluations`)."""
    return clear_of_evaluations(base + 1000 * slot + 7919 * incarnation, envs)


@dataclasses.dataclass
class ActorSetup:
    """What every actor of a run needs to know, made by the agent's builder; plain data."""

    env_spec: EnvSpec
    envs_per_actor: int
    #: :func:`~actorq.core.exploration.make_behaviour` kind, and its per-actor, per-env noise
    behaviour: str
    noise: list[list[float]]
    #: what the actor's steps become (n-step transitions, trajectory chunks, or none)
    adder: AdderSpec
    #: the actor side of the replay kind's rule
    gate: GateSpec
    seed: int
    runtime: str = "ort"
    threads: int = 1
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: which actor class acts (:data:`ACTOR_KINDS`): ``"vector"`` steps Gymnasium envs with a
    #: :class:`~actorq.quant.snapshot.PolicySnapshot`; a workload's own kind (``"graph"``: GO's
    #: one-shot graph decisions) reads ``workload``, plain data it defines
    kind: str = "vector"
    workload: dict[str, Any] = dataclasses.field(default_factory=dict)

    def actor_config(
        self, i: int, incarnation: int = 0, in_process: bool = False
    ) -> dict[str, Any]:
        """Actor ``i``'s config (JSON-able); backends add where it reads and writes."""
        return {
            "actor": i,
            "env_spec": self.env_spec.to_json(),
            "env_kwargs": self.env_kwargs,
            "envs_per_actor": self.envs_per_actor,
            "behaviour": self.behaviour,
            "noise": self.noise[i],
            "adder": self.adder.to_json(),
            "gate": self.gate.to_json(),
            "seed": actor_seed(
                self.seed, 0 if in_process else i + 1, incarnation, self.envs_per_actor
            ),
            "runtime": self.runtime,
            "threads": self.threads,
            "kind": self.kind,
            "workload": self.workload,
        }


#: Actor classes by :attr:`ActorSetup.kind`, as ``"module:Class"`` (imported when used, so an
#: actor process loads only its own). Each has ``from_config(cfg, source)`` and the attributes
#: backends read: ``k`` (items per step), ``runtime`` (None before the first snapshot),
#: ``version``, ``rejected``, ``env_steps``, ``inference_s``, ``env_s``, ``at_boundary``, and
#: ``update()``, ``step()``, ``close()`` as :class:`VectorActor` has them.
ACTOR_KINDS: dict[str, str] = {
    "vector": "actorq.core.loop:VectorActor",
    "graph": "actorq.agents.go.actor:GraphActor",
}


def make_actor(cfg: dict[str, Any], source: ParameterSource) -> Any:
    """The one place an actor is built (every backend calls it), from
    :meth:`ActorSetup.actor_config`'s data."""
    kind = str(cfg.get("kind", "vector"))
    if kind not in ACTOR_KINDS:
        raise ValueError(f"unknown actor kind {kind!r}; expected one of {sorted(ACTOR_KINDS)}")
    return load(ACTOR_KINDS[kind]).from_config(cfg, source)


def fetch_newer(source: ParameterSource, version: int) -> tuple[int, bytes] | None:
    """The source's snapshot if it is newer than ``version`` (a cheap version read first)."""
    if source.latest_version() == version:
        return None
    got = source.fetch()
    return None if got is None or got[0] == version else got


def _step_info(info: dict[str, Any], key: str, done: np.ndarray) -> np.ndarray | None:
    """Each env's ``info[key]`` of this step, summed over the step and the reset that followed
    it, or None if the env reports none. A Gymnasium vector env files an ended env's step info
    under ``info["final_info"]`` and its reset's at the top, each masked by ``"_" + key``;
    actorq's own vector envs give every env's at the top."""
    final = info.get("final_info") or {}
    if key not in info and key not in final:
        return None
    out = np.zeros(len(done), np.float64)
    for where in (info, final):
        if key in where:
            mask = np.asarray(where.get("_" + key, np.ones(len(done), bool)), bool)
            if where is final:
                mask &= done
            out[mask] += np.asarray(where[key], np.float64)[mask]
    return out


class GameTally:
    """Whole games on the raw score, from envs that report them (:data:`actorq.envs.SCORE`,
    :data:`~actorq.envs.GAME_OVER`: Atari's training episodes are lives, its rewards clipped):
    (score, agent steps) of each game that ended, as CleanRL's and SB3's training curves count."""

    def __init__(self, num_envs: int) -> None:
        self.score = np.zeros(num_envs, np.float64)
        self.steps = np.zeros(num_envs, np.int64)

    def step(self, info: dict[str, Any], done: np.ndarray) -> list[tuple[float, int]] | None:
        """The games that ended on this step; None where the env reports no games."""
        score = _step_info(info, SCORE, done)
        over = None if score is None else _step_info(info, GAME_OVER, done)
        if score is None or over is None:  # most envs: one look at info, every step
            return None
        self.score += score
        self.steps += 1
        ended = np.flatnonzero(over > 0)
        games = [(float(self.score[i]), int(self.steps[i])) for i in ended]
        self.score[ended], self.steps[ended] = 0.0, 0
        return games


class VectorActor(Actor):
    """Steps K copies of an environment with a quantized policy snapshot.

    Snapshots come from a :class:`ParameterSource`: an MLP
    :class:`~actorq.quant.snapshot.PolicySnapshot`, or an ``obs-logits``
    :class:`~actorq.quant.model_snapshot.ModelSnapshot` (a whole ONNX policy, e.g. the chip
    placement network) whose sizes fit the environment. A corrupt, non-finite or misfitting one
    is refused (counted in ``rejected``) and the actor keeps acting with its last good one.
    Snapshots are swapped only where the adder allows it (between trajectory chunks for
    on-policy agents, so a chunk is collected with one policy version).
    """

    def __init__(
        self,
        env_id: str,
        spec: EnvSpec,
        num_envs: int,
        seed: int,
        source: ParameterSource,
        behaviour: Behaviour,
        adder: NStepAdder | TrajectoryAdder | FrameAdder,
        runtime: str = "ort",
        threads: int = 1,
        env_kwargs: dict[str, Any] | None = None,
        index: int = 0,
    ) -> None:
        self.env = make_vector_env(env_id, num_envs, **(env_kwargs or {}))
        # Continuous policies act in [-1, 1] (what replay stores); the env gets its own bounds.
        self._bounds = (
            None
            if spec.discrete
            else (np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32))
        )
        self.spec = spec
        self.k = num_envs
        self.index = index
        self.source = source
        self.behaviour = behaviour
        self.runtime_kind, self.threads = runtime, threads
        self.runtime: PolicyRuntime | ModelRuntime | None = None
        self.version = -1
        self.rejected = 0
        self.swaps = 0
        self.adder = adder
        obs, _ = self.env.reset(seed=seed)
        self.env.action_space.seed(seed)
        self._obs_dtype = np.dtype(spec.observation.dtype)  # uint8 pixels stay bytes
        self.obs = np.asarray(obs, self._obs_dtype)
        self.adder.observe_first(self.obs)
        self._ret = np.zeros(num_envs, np.float64)
        self._len = np.zeros(num_envs, np.int64)
        self._games = GameTally(num_envs)
        self.env_steps = 0
        self.inference_s = 0.0  # time inside the policy runtime
        self.env_s = 0.0  # time inside env.step (the simulator, resets included)

    @classmethod
    def from_config(cls, cfg: dict[str, Any], source: ParameterSource) -> VectorActor:
        """The one place an actor is built, from :meth:`ActorSetup.actor_config`'s data."""
        spec = EnvSpec.from_json(cfg["env_spec"])
        k, seed, index = int(cfg["envs_per_actor"]), int(cfg["seed"]), int(cfg["actor"])
        return cls(
            spec.env_id,
            spec,
            k,
            seed,
            source,
            make_behaviour(cfg["behaviour"], spec.num_actions, cfg["noise"], seed),
            adder_from_json(cfg["adder"]).build(k, spec, index),
            runtime=cfg.get("runtime", "ort"),
            threads=int(cfg.get("threads", 1)),
            env_kwargs=cfg.get("env_kwargs", {}),
            index=index,
        )

    @property
    def at_boundary(self) -> bool:
        """Whether the next step starts a new item (a chunk, for trajectory adders)."""
        return self.adder.at_boundary

    def update(self) -> bool:
        if not self.adder.at_boundary:
            return False  # mid-chunk: finish it with the policy it started with
        got = fetch_newer(self.source, self.version)
        if got is None:
            return False
        try:
            snap = decode_snapshot(got[1])
            if isinstance(snap, ModelSnapshot):
                self._check_fits(snap)
            runtime = make_runtime(snap, self.runtime_kind, self.threads, in_actor=True)
            if isinstance(runtime, ModelRuntime):
                self._check_runs(runtime)
            # after the runtime: a snapshot refused here leaves behaviour and runtime as they were
            self.behaviour.set_snapshot(snap)
        except (SnapshotError, ValueError):
            self.rejected += 1
            # Not retried every step, and the items go on under this version although the
            # last good policy acts: a synchronous on-policy learner takes only data of its
            # latest version (its queue drops older items, the gate holds older actors), so
            # honest tags would starve it; the recorded log-probs are the acting policy's,
            # so its importance ratio stays exact. Off-policy items carry no version.
            self.version = got[0]
            return False
        self.runtime = runtime
        self.version = snap.version
        self.swaps += 1
        return True

    def _check_fits(self, snap: ModelSnapshot) -> None:
        """A whole-model snapshot is another network for every environment: refuse one built
        for other observations or actions (another netlist) instead of failing mid-step."""
        want = {"obs_dim": self.spec.obs_dim, "num_actions": self.spec.num_actions}
        got = {k: snap.meta.get(k) for k in want}
        if got != want:
            raise SnapshotError(f"model snapshot for {got}, this actor's environment has {want}")

    def _check_runs(self, runtime: ModelRuntime) -> None:
        """A model's metadata may fit while its graph does not (another input shape, another
        output width): run it once on this actor's observations, so that it is refused here
        rather than failing, or acting out of range, mid-step."""
        obs = self.obs
        try:
            out = np.asarray(runtime(obs))
        except Exception as e:  # onnxruntime's own error types (InvalidArgument, Fail, ...)
            why = first_line(e)
            raise SnapshotError(
                f"model snapshot does not run on this actor's observations: {why}"
            ) from None
        if out.shape != (len(obs), self.spec.num_actions):
            raise SnapshotError(
                f"model snapshot outputs {list(out.shape)} for {len(obs)} observations; this "
                f"actor's environment has {self.spec.num_actions} actions"
            )

    def select_action(self, obs: np.ndarray) -> np.ndarray:
        return self._act(obs)[0]

    def _act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.runtime is None:
            raise RuntimeError("actor has no policy snapshot yet")
        t = time.perf_counter()
        out = self.runtime(obs)
        self.inference_s += time.perf_counter() - t
        return self.behaviour.act(out)

    def step(self) -> tuple[Batch, list[tuple[float, int]]]:
        action, extras = self._act(self.obs)
        if self._bounds is None:
            env_action = action
        else:  # stochastic policies' samples may leave [-1, 1]: clip before the env sees them
            env_action = to_env_action(np.clip(action, -1.0, 1.0), *self._bounds)
        t = time.perf_counter()
        obs, rew, term, trunc, info = self.env.step(env_action)
        self.env_s += time.perf_counter() - t
        obs = np.asarray(obs, self._obs_dtype)  # no copy for float32 (or uint8 pixel) envs
        done = term | trunc
        final_arr = None
        episodes = self._games.step(info, done)
        self._ret += rew
        self._len += 1
        if done.any():
            # SAME_STEP autoreset: ``obs`` already holds the next episodes' first observations;
            # the ended episodes' last ones are in info["final_obs"] (None for other envs).
            ended = np.flatnonzero(done)
            final_arr = obs.copy()
            final_arr[ended] = np.stack([info["final_obs"][i] for i in ended])
            if episodes is None:  # the env's episodes are its games, its rewards their score
                episodes = [(float(self._ret[i]), int(self._len[i])) for i in ended]
            self._ret[ended], self._len[ended] = 0.0, 0
        out = self.adder.add(action, rew, obs, term, trunc, final_arr, extras, self.version)
        self.obs = obs
        self.env_steps += self.k
        return out, episodes or []

    def close(self) -> None:
        self.env.close()
