"""What every actorq experiment shares: environment, precision, actors, replay, rate limiting,
evaluation, checkpoints, logging. Agents extend it with their own fields (agents/*/config.py);
the dataclass is the CLI's --help, so every field is documented.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Annotated, Any, ClassVar, Literal, Self

import tyro

from actorq.distributed.cores import usable_cores
from actorq.distributed.settings import OffPolicyRaySettings, RaySettings
from actorq.errors import ConfigError
from actorq.quant.formats import FORMATS, PRECISIONS
from actorq.settings import (
    AT_LEAST_1,
    FINITE,
    NON_NEGATIVE,
    POSITIVE,
    Bound,
    Group,
    Grouped,
    check_fields,
    flag,
    flat_items,
    group_types,
    leaf_paths,
)

__all__ = [
    "AT_LEAST_1",
    "FINITE",
    "NON_NEGATIVE",
    "POSITIVE",
    "Bound",
    "ExperimentConfig",
    "Group",
    "OffPolicyConfig",
    "check_action_repeat",
    "check_fields",
    "parse_hidden",
]

#: What a resume may change: run length, display, and how updates run (not what they compute).
#: Anything else is the saved run's (but where the learner computes:
#: :func:`actorq.run.resume.resume_device`). A bench's resumed cells follow the same rule.
RESUME_OVERRIDES = (
    "total_steps", "progress", "log_every", "stop_at_target", "learner_mode", "updates_per_turn",
    "replay_on_device", "learner_threads",
)  # fmt: skip
MAX_WIDTH = 1 << 16  # a 65536-wide layer is already 16 GiB of fp32 weights per pair
MAX_LAYERS = 64


def check_action_repeat(env: str, action_repeat: int) -> None:
    """``--action-repeat`` is the Control Suite wrapper's (``dmc:`` ids): elsewhere it would be
    recorded in config.json but never applied (Atari repeats 4 frames itself), so refused."""
    if action_repeat != 1 and not env.startswith("dmc:"):
        raise ConfigError(
            f"--action-repeat {action_repeat} applies to dmc: ids only; {env} steps once per "
            "action (Atari ids repeat 4 frames themselves)"
        )


def parse_hidden(
    text: str | tuple[int, ...] | list[int], flag: str = "--hidden"
) -> tuple[int, ...]:
    """Hidden sizes from ``"2048,2048,2048"`` (or a sequence); positive integers only."""
    if not isinstance(text, str | tuple | list):
        raise ConfigError(f"{flag} must be comma-separated positive integers, got {text!r}")
    parts = text.split(",") if isinstance(text, str) else list(text)
    if any(isinstance(p, bool | float) for p in parts):
        raise ConfigError(f"{flag} must be comma-separated positive integers, got {text!r}")
    try:
        sizes = tuple(int(str(p).strip()) for p in parts if str(p).strip() != "")
    except ValueError:
        raise ConfigError(
            f"{flag} must be comma-separated positive integers, got {text!r}"
        ) from None
    if not sizes or any(s <= 0 for s in sizes):
        raise ConfigError(f"{flag} must be comma-separated positive integers, got {text!r}")
    if any(s > MAX_WIDTH for s in sizes) or len(sizes) > MAX_LAYERS:
        raise ConfigError(
            f"{flag}: at most {MAX_LAYERS} layers of at most {MAX_WIDTH} units, got {text!r}"
        )
    return sizes


HiddenArg = tyro.constructors.PrimitiveConstructorSpec(
    nargs=1,
    metavar="W,W,...",
    # validated in validate(), so a bad value is reported as one line like every config error
    instance_from_str=lambda args: args[0],
    is_instance=lambda x: isinstance(x, tuple | str),
    str_from_instance=lambda x: [",".join(str(i) for i in x)],
)
Widths = Annotated[tuple[int, ...], HiddenArg]


@dataclasses.dataclass
class ExperimentConfig(Grouped):
    """Fields every agent's experiment has. Subclasses redeclare a field to change its default.

    Settings that belong together are groups (nested dataclasses, :mod:`actorq.settings`): a
    section of ``--help`` each, their flags unprefixed. A backend's group (``ray``) is listed
    only when that backend is chosen (``--backend ray --help``)."""

    agent: ClassVar[str] = ""
    #: Fields holding layer widths (parsed from "W,W,..."); the first is the acting network's.
    width_fields: ClassVar[tuple[str, ...]] = ()
    #: The flags that size an on-policy update's rollout (the memory check names them).
    rollout_flags: ClassVar[str] = "--num-steps, --envs-per-actor, --actors"
    #: Optional settings naming a place (a directory, an address) for which "" is no value,
    #: beside ``run_dir`` and ``resume``.
    named_places: ClassVar[tuple[str, ...]] = ("ray_address",)
    #: Settings that exist only with their backend: group name -> backend (``--backend ray``).
    backend_groups: ClassVar[dict[str, str]] = {"ray": "ray"}
    #: Settings retired after their experiments (docs/go-transfer.md, "What was tried"): name ->
    #: (the default they had, why). An old config.json holding one at its default loads.
    retired: ClassVar[dict[str, tuple[Any, str]]] = {}
    #: What a saved run's config.json that lacks a setting ran with (the setting came later,
    #: with another default): applied to saved runs only (resume, eval), never to a user's
    #: settings, whose unnamed fields take the class defaults.
    saved_run_defaults: ClassVar[dict[str, Any]] = {}
    #: Ranges of numeric fields (:func:`check_fields`); subclasses add their own.
    bounds: ClassVar[dict[str, Bound]] = {
        "calibration_states": Bound(1, 10**7),
        "actors": Bound(0, 100_000),
        "envs_per_actor": Bound(1, 4096),
        "total_steps": Bound(1, 10**13),
        "target_return": FINITE,
        "atari_sticky": Bound(0, 1, hi_open=True),
        "gamma": Bound(0, 1, lo_open=True),
        "publish_every": Bound(1, 10**9),
        "eval_every": Bound(1, 10**13),
        "eval_episodes": Bound(1, 100_000),
        "checkpoint_every": Bound(1, 10**12),
        "updates_per_turn": Bound(1, 10**6),
        "actor_threads": Bound(1, 1024),
        "learner_threads": Bound(0, 1024),
        "seed": Bound(0, 2**32 - 1),  # numpy and torch seeds
        "log_every": Bound(0, 10**9, lo_open=True),
    }

    env: str = "gym:CartPole-v1"
    """Environment id: gym:<Gymnasium id> or dmc:<domain>-<task>."""
    atari_engine: Literal["auto", "envpool", "ale"] = "auto"
    """What steps the actors' games for atari: ids: envpool (EnvPool's C++ pool, the [envpool]
    extra), ale (ale-py under Gymnasium's wrappers), or auto (envpool where it is installed). A
    run saves the engine it started with: evaluations and resumes see the same frames."""
    atari_sticky: float = 0.0
    """atari: ids: the probability that the emulator repeats the previous action on a frame
    (sticky actions, Machado et al. 2018: 0.25, ALE v5's default), in training and evaluations.
    0 (default): NoFrameskip-v4's protocol, that of the tables actorq compares with (rl-zoo's)."""
    precision: str = "int8"
    """Precision of the policy snapshots actors run: fp32, fp16, int8, int4, or auto (time each
    at the actors' batch on this machine, keep the fastest that acts like fp32; the learner always
    trains in fp32)."""
    granularity: Literal["per_channel", "per_tensor"] = "per_channel"
    """int8 weight scales: one per output channel (default) or one per tensor."""
    calibration: Literal["auto", "gptq", "none"] = "auto"
    """How int8/int4 weights are rounded at each publish: gptq (GPTQ on states from replay:
    fewer flipped greedy actions), none (round to nearest), or auto (gptq while the widest
    quantized layer has <= 512 inputs, where it costs a few ms; round to nearest beyond). A
    convolutional int8 policy: auto is GPTQ for its convolutions and nearest for its fc layer,
    gptq for all (docs/atari.md: agreement and publish cost of each)."""
    calibration_states: int = 1024
    """Replay states GPTQ calibrates on at each publish (a convolutional int8 policy's activation
    ranges: at most 256 of them)."""
    actors: int = 2
    """Actor processes. 0 runs one actor in the learner's process, synchronously and
    deterministically for a seed (for debugging and tests)."""
    envs_per_actor: int = 16
    """Environments each actor steps together, with one batched inference per step."""
    total_steps: int = 300_000
    """Budget of environment steps (all actors together)."""
    target_return: float | None = None
    """Stop once the greedy evaluation mean reaches this; default: the environment's
    registered reward threshold (475 for CartPole-v1), if it has one."""
    stop_at_target: bool = True
    """Stop training when the evaluation reaches target_return and a confirmation evaluation on
    fresh seeds agrees (one lucky evaluation is not enough)."""
    gamma: float = 0.99
    """Discount factor."""
    publish_every: int = 50
    """Learner updates between published (quantized) snapshots."""
    eval_every: int = 10_000
    """Environment steps between greedy evaluations with the actors' snapshot."""
    eval_episodes: int = 10
    """Episodes per evaluation (separately seeded environments)."""
    checkpoint_every: int = 5_000
    """Learner updates between checkpoints (one is also written at the end and on Ctrl-C)."""
    backend: Literal["local", "ray"] = "local"
    """Where actors run: local (processes on this machine sharing memory; no services) or ray
    (Ray actors, sharded replay, a parameter cache per node; needs the [distributed] extra).
    ``--backend ray --help`` lists Ray's own settings."""
    ray: Annotated[RaySettings, Group] = dataclasses.field(default_factory=RaySettings)
    updates_per_turn: int = 8
    """Learner updates in a row while the replay rule allows them, before the loop looks at
    the actors again (draining their channels, counters, evaluation and log checks): that
    per-turn work is paid once per K updates. 1: one update per turn."""
    runtime: Literal["ort", "numpy", "torch"] = "ort"
    """Actor inference runtime: onnxruntime (default), numpy reference, torch fallback."""
    actor_threads: int = 1
    """Intra-op threads per actor's runtime."""
    learner_threads: int = 1
    """Torch threads for the learner; 0: auto, the cores it does not share (every usable core
    when actors wait while it updates, as synchronous PPO's do; else those the actor
    processes leave, at least 1, counting every actor as on this machine)."""
    energy: bool = True
    """Track the run's energy (kWh) and carbon (kg CO2eq) with codecarbon's offline tracker
    (whole machine: learner and actors; [bench] extra). A tracker failure never stops a run."""
    energy_country: str = "USA"
    """ISO 3166 alpha-3 code of the grid whose carbon intensity turns kWh into CO2 (a fixed
    grid keeps the figure offline and reproducible; fp32/int8 CO2 ratios do not depend on it)."""
    device: str = "cpu"
    """Learner device (cpu or cuda); actors always run on the CPU."""
    learner_mode: Literal["auto", "eager", "compile", "graph"] = "auto"
    """How each update runs: eager, compile (torch.compile), graph (the whole update captured
    once as a CUDA graph and replayed: one launch per update; CUDA only), or auto (graph on
    CUDA, eager on the CPU, where benchmarks/learner_limit.py finds compiling does not pay).
    Every mode computes the same update."""
    seed: int = 0
    """Seed for networks, exploration, environments and replay sampling."""
    run_dir: str | None = None
    """Where logs, checkpoints and the config go; default
    runs/<agent>-<env>-<precision>-s<seed>-<time>."""
    resume: str | None = None
    """Resume from this run directory's last checkpoint (continues counters and logs)."""
    log_every: float = 2.0
    """Seconds between metric log lines and progress updates."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        # Normalize only; validate() raises. (tyro would wrap an error raised here in a
        # multi-line box; the CLI validates after parsing and prints one line instead.)
        for name in self.width_fields:
            with contextlib.suppress(ConfigError):
                setattr(self, name, parse_hidden(getattr(self, name), flag(name)))

    def policy_hidden(self) -> tuple[int, ...]:
        """Hidden widths of the network actors run (what gets quantized): the first of
        ``width_fields`` by convention."""
        return tuple(getattr(self, self.width_fields[0]))

    def env_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``make_env`` (e.g. a Control Suite task's action repeat)."""
        if not self.env.startswith("atari:"):
            return {}
        sticky = {"sticky": self.atari_sticky} if self.atari_sticky else {}
        return {"engine": self.atari_engine, **sticky}

    def validate(self) -> None:
        """Raise :class:`ConfigError` (one line) for the first invalid field."""
        for name in self.width_fields:
            setattr(self, name, parse_hidden(getattr(self, name), flag(name)))
        check_fields(self)
        for name in ("run_dir", "resume", *self.named_places):
            # "" is no directory, not "the default": Path("") is ".", and `not ""` read it as
            # absent, so `--resume ""` silently started a new run
            if getattr(self, name) == "":
                raise ConfigError(f"{flag(name)} is empty; give one, or leave it out")
        if self.atari_sticky and not self.env.startswith("atari:"):
            raise ConfigError(f"--atari-sticky applies to atari: ids, and --env is {self.env}")
        if self.env.startswith("atari:"):
            from actorq.envs.atari import resolve_engine

            # auto is decided once, at the run's start, and saved with it: the engines' frames
            # differ in their grayscale (a policy trained on one sees shifted pixels on the
            # other); a saved envpool run where EnvPool is missing is one line, never ale's
            self.atari_engine = resolve_engine(self.atari_engine)
        if self.precision not in (*PRECISIONS, "auto"):
            raise ConfigError(
                f"unknown precision {self.precision!r}; expected one of "
                f"{', '.join(PRECISIONS)} or auto"
            )
        if self.backend == "ray" and self.actors == 0:
            raise ConfigError("--backend ray needs --actors >= 1 (0 means one in-process actor)")
        from actorq.energy import country_problem

        problem = country_problem(self.energy_country)
        if problem:
            raise ConfigError(f"--energy-country {problem}")
        self._check_device()
        if self.learner_mode == "graph" and not self.device.startswith("cuda"):
            raise ConfigError("--learner-mode graph needs --device cuda (a CUDA graph)")

    def _check_device(self) -> None:
        problem = device_problem(self.device)
        if problem:
            raise ConfigError(problem)

    def uses_gptq(self) -> bool:
        """Whether publishes calibrate int8/int4 rounding with GPTQ (see ``calibration``)."""
        fmt = FORMATS.get(self.precision)  # None for "auto": it decides after calibrating
        if fmt is None or not fmt.calibrated or self.calibration == "none":
            return False
        # quantized layers are the hidden-to-hidden ones: their input widths are hidden[:-1]
        return self.calibration == "gptq" or max(self.policy_hidden()[:-1], default=0) <= 512

    def learner_takes_turns(self) -> bool:
        """Whether the actors wait while the learner updates, so it may use every core: an
        on-policy agent's queue with a lag bound of 1 (PPO's and GO's ``max_policy_lag``, the
        builders' ``QueueSpec``); off-policy learners share the cores with their actors."""
        return getattr(self, "max_policy_lag", None) == 1

    def learner_torch_threads(self, cores: int | None = None) -> int:
        """``learner_threads``, with 0 (auto) resolved on this machine (``cores``: its usable
        cores, by default :func:`~actorq.distributed.cores.usable_cores`)."""
        if self.learner_threads > 0:
            return self.learner_threads
        if cores is None:
            cores = usable_cores()
        if self.actors == 0 or self.learner_takes_turns():
            return cores  # in-process actors, or actors waiting: nobody else computes
        return max(1, cores - self.actors * self.actor_threads)

    def actors_shape_updates(self) -> bool:
        """Whether the actor count shapes what the learner computes, so that a resume keeps it:
        an on-policy update trains on the rollouts of ``actors × envs_per_actor`` environments
        (PPO's batch, GO's graphs per actor)."""
        return True

    def placement(self) -> frozenset[str]:
        """The settings that say where the run's actors run, which a resume may change (``actorq
        train --resume RUN --backend ray``): the backend, each backend's settings group, and the
        actor count where it does not shape the updates (:meth:`actors_shape_updates`). A
        checkpoint holds no more of them than this: replay, counters and the rate limiter's
        place read back on every backend (docs/distributed.md)."""
        groups = group_types(type(self))
        names = {"backend", *(n for g in self.backend_groups for n in leaf_paths(groups[g]))}
        if not self.actors_shape_updates():
            names.add("actors")
        return frozenset(names)

    @classmethod
    def backend_of(cls, name: str) -> str | None:
        """The backend whose settings group holds setting ``name`` (``ray`` for
        ``replay_shards``), or None for a setting of every backend."""
        group = leaf_paths(cls).get(name)
        return None if group is None else cls.backend_groups.get(group)

    def cores_warning(self) -> str | None:
        """A warning when actor processes alone outnumber the cores. The learner does not count:
        the replay's rate limiter (samples per insert; PPO's synchronous update) makes it and
        the actors take turns, so ``cores`` actors and a learner share ``cores`` cores without
        preempting each other (``make run``'s 2 actors on a 2-core machine)."""
        cores = usable_cores()
        if self.actors > cores:
            return (
                f"{self.actors} actor processes on {cores} cores: actors will preempt each "
                f"other (fine for small policies; for throughput use --actors {cores} or fewer)"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        """The settings flat (groups flattened: the form config.json has always had)."""
        d = {k: _plain(v) for k, v in flat_items(self)}
        for name in self.width_fields:
            d[name] = list(getattr(self, name))
        d["agent"] = self.agent
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        """A config from its JSON: settings flat (what actorq writes) or nested by group, keys
        this class does not know ignored (e.g. ``agent``), a retired setting accepted only at
        the value it had by default (:attr:`retired`)."""
        for key, (default, why) in cls.retired.items():
            if key in d and d[key] != default:
                raise ConfigError(
                    f"{flag(key)} was retired ({why}); run it from commit {ARCHIVE_COMMIT}"
                )
        names = {f.name for f in dataclasses.fields(cls)} | set(leaf_paths(cls))
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def for_env(cls, env: str, **overrides: Any) -> Self:
        """A config for ``env`` that starts from its family's preset for this agent (Atari:
        rl-baselines3-zoo's settings, :data:`actorq.envs.atari.PRESETS`), ``overrides`` on top:
        what ``actorq train AGENT --env ENV`` builds. The constructor itself keeps the generic
        defaults (``PPOConfig(env="atari:Pong")`` trains with CartPole's settings)."""
        from actorq.envs import preset

        return cls(**{**preset(env, cls.agent), **overrides, "env": env})


def not_this_backend(given: str, owner: str, backend: str) -> str:
    """The one line for flag ``given``, a setting of ``--backend owner``, on a run whose backend
    is ``backend`` (a new run's command line, or a resume's)."""
    return (
        f"{given} is a setting of --backend {owner}, and this run's backend is {backend}: "
        f"add --backend {owner}"
    )


#: The commit that last holds actorq's retired experiment knobs and the probes that used them.
ARCHIVE_COMMIT = "67fd709"


def _plain(v: Any) -> Any:
    return dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v


@dataclasses.dataclass
class OffPolicyConfig(ExperimentConfig):
    """Fields of off-policy agents (DQN, D4PG): n-step transitions in a uniform replay behind a
    samples-per-insert rate limiter."""

    bounds: ClassVar[dict[str, Bound]] = {
        # the n-step adder keeps an n × n matrix and n × K windows: 1000 is far past any use
        "n_step": Bound(1, 1000),
        "batch_size": Bound(1, 10**6),
        "samples_per_insert": Bound(0, 10**6, lo_open=True),
        "error_buffer": NON_NEGATIVE,
        "min_replay_size": Bound(1, 10**10),
        "replay_size": Bound(1, 10**10),
    }

    n_step: int = 3
    """n of the n-step return targets."""
    batch_size: int = 128
    """Learner minibatch size."""
    samples_per_insert: float = 32.0
    """Replay ratio: items sampled by the learner per item inserted by actors. Enforced by the
    rate limiter in every run, so fp32 and quantized runs consume the same data per update."""
    error_buffer: float | None = None
    """Slack of the rate limiter in samples (Reverb semantics); default: 10% of
    samples_per_insert * min_replay_size, and never less than what avoids deadlock."""
    min_replay_size: int = 1_000
    """Transitions collected before learning starts."""
    replay_size: int = 100_000
    """Replay capacity (transitions)."""
    save_replay: bool = True
    """Include the replay buffer in checkpoints (npz), for a faithful resume."""
    replay_on_device: Literal["auto", "yes", "no"] = "auto"
    """Keep a copy of the replay on the learner's device and gather each batch there (the
    sampled indices are the host ring's, so batches are identical); the host ring stays the
    one that is checkpointed. auto: yes on a CUDA learner when the replay takes at most a
    quarter of the device's memory. Local backend (--backend ray samples in its shards)."""
    ray: Annotated[OffPolicyRaySettings, Group] = dataclasses.field(
        default_factory=OffPolicyRaySettings
    )
    publish_async: bool = True
    """With actor processes (--actors >= 1): quantize, encode and send each periodic snapshot on
    a background thread, so the learner's thread pays only a copy of the policy's weights (a
    publish is skipped, never waited for, while the previous one is still being sent). Menger's
    rule that parameter distribution never throttles the learner; measured: publishing took
    28-34% of a GPU learner's time (docs/results.md). --actors 0 always publishes in line: its
    runs are deterministic for a seed."""

    def validate(self) -> None:
        super().validate()
        if self.min_replay_size > self.replay_size:
            raise ConfigError("--min-replay-size cannot exceed --replay-size")

    def actors_shape_updates(self) -> bool:
        """Off-policy updates sample a replay whatever fills it, but for pixels: their frame
        replay keeps one ring per environment (``actors × envs_per_actor``, replay/frames.py)."""
        from actorq.envs import observes_pixels

        return observes_pixels(self.env)

    def resolved_error_buffer(self) -> float:
        from actorq.replay.rate_limiter import SampleToInsertRatio

        floor = SampleToInsertRatio.min_error_buffer(
            self.batch_size, self.samples_per_insert, self.envs_per_actor * self.n_step
        )
        eb = self.error_buffer
        if eb is None:
            eb = 0.1 * self.samples_per_insert * self.min_replay_size
        return float(max(eb, floor))


def is_device_name(dev: object) -> bool:
    """Whether ``dev`` names a learner device: cpu, cuda or cuda:N."""
    return isinstance(dev, str) and re.fullmatch(r"cpu|cuda(:[0-9]+)?", dev) is not None


def device_problem(dev: str) -> str | None:
    """Why the learner cannot run on ``dev`` here (one line), or None: a malformed name, or a
    CUDA device this machine lacks."""
    if not is_device_name(dev):
        return f"--device must be cpu, cuda or cuda:N, got {dev!r}"
    kind, _, index = dev.partition(":")
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            return f"--device {dev}: no CUDA device on this machine"
        if index and int(index) >= torch.cuda.device_count():
            return f"--device {dev}: this machine has {torch.cuda.device_count()} CUDA device(s)"
    return None
