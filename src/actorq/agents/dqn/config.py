"""DQN experiment configuration: one dataclass, every field documented (it is the CLI's --help)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Annotated, Any, Literal

import tyro

from actorq.errors import ConfigError
from actorq.quant.quantizer import PRECISIONS


def parse_hidden(text: str | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """Hidden sizes from ``"2048,2048,2048"`` (or a sequence); positive integers only."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    try:
        sizes = tuple(int(str(p).strip()) for p in parts if str(p).strip() != "")
    except ValueError:
        raise ConfigError(
            f"--hidden must be comma-separated positive integers, got {text!r}"
        ) from None
    if not sizes or any(s <= 0 for s in sizes):
        raise ConfigError(f"--hidden must be comma-separated positive integers, got {text!r}")
    return sizes


_HiddenArg = tyro.constructors.PrimitiveConstructorSpec(
    nargs=1,
    metavar="W,W,...",
    # validated in __post_init__, so a bad value is reported as one line like every config error
    instance_from_str=lambda args: args[0],
    is_instance=lambda x: isinstance(x, tuple | str),
    str_from_instance=lambda x: [",".join(str(i) for i in x)],
)


@dataclasses.dataclass
class DQNConfig:
    """Train DQN with quantized actors (ActorQ) on the embedded local backend."""

    env: str = "gym:CartPole-v1"
    """Environment id, e.g. gym:CartPole-v1, gym:Acrobot-v1, gym:MountainCar-v0."""
    precision: str = "int8"
    """Precision of the policy snapshots actors run: fp32, fp16 or int8 (the learner always
    trains in fp32)."""
    granularity: Literal["per_channel", "per_tensor"] = "per_channel"
    """int8 weight scales: one per output channel (default) or one per tensor."""
    calibration: Literal["auto", "gptq", "none"] = "auto"
    """How int8 weights are rounded at each publish: gptq (GPTQ on states from replay: fewer
    flipped greedy actions), none (round to nearest), or auto (gptq while the widest int8
    layer has <= 512 inputs, where it costs a few ms; round to nearest beyond)."""
    calibration_states: int = 1024
    """Replay states GPTQ calibrates on at each publish."""
    actors: int = 2
    """Actor processes. 0 runs one actor in the learner's process, synchronously and
    deterministically for a seed (for debugging and tests)."""
    envs_per_actor: int = 16
    """Environments each actor steps together, with one batched inference per step."""
    hidden: Annotated[tuple[int, ...], _HiddenArg] = (256, 256)
    """Hidden layer widths of the Q-network, e.g. 2048,2048,2048 (the QuaRL paper's actors)."""
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
    n_step: int = 3
    """n of the n-step return targets."""
    batch_size: int = 128
    """Learner minibatch size."""
    learning_rate: float = 2.5e-4
    """Adam learning rate."""
    adam_eps: float = 1e-5
    """Adam epsilon (1e-5 rather than 1e-8: steadier on sparse, bootstrapped targets)."""
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
    target_update_period: int = 250
    """Learner updates between copies of the online network into the target network."""
    max_grad_norm: float = 10.0
    """Gradient norm clip."""
    double_q: bool = True
    """Double DQN targets (van Hasselt et al., 2016)."""
    dueling: bool = True
    """Dueling head (Wang et al., 2016): the greedy action then depends only on an advantage
    stream at the scale of the action gap, so int8 actors agree with fp32 far more often."""
    huber_delta: float = 1.0
    """Huber loss threshold."""
    epsilon: float = 0.4
    """Ape-X exploration base: environment instance i of N explores with
    epsilon^(1 + epsilon_alpha * i / (N - 1))."""
    epsilon_alpha: float = 7.0
    """Ape-X exploration exponent spread."""
    publish_every: int = 50
    """Learner updates between published (quantized) snapshots."""
    eval_every: int = 10_000
    """Environment steps between greedy evaluations with the actors' snapshot."""
    eval_episodes: int = 10
    """Episodes per evaluation (separately seeded environments)."""
    checkpoint_every: int = 5_000
    """Learner updates between checkpoints (one is also written at the end and on Ctrl-C)."""
    save_replay: bool = True
    """Include the replay buffer in checkpoints (npz), for a faithful resume."""
    runtime: Literal["ort", "numpy", "torch"] = "ort"
    """Actor inference runtime: onnxruntime (default), numpy reference, torch fallback."""
    actor_threads: int = 1
    """Intra-op threads per actor's runtime."""
    learner_threads: int = 1
    """Torch threads for the learner."""
    device: str = "cpu"
    """Learner device (cpu or cuda); actors always run on the CPU."""
    seed: int = 0
    """Seed for networks, exploration, environments and replay sampling."""
    run_dir: str | None = None
    """Where logs, checkpoints and the config go; default
    runs/dqn-<env>-<precision>-s<seed>-<time>."""
    resume: str | None = None
    """Resume from this run directory's last checkpoint (continues counters and logs)."""
    log_every: float = 2.0
    """Seconds between metric log lines and progress updates."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        # Normalize only; validate() raises. (tyro would wrap an error raised here in a
        # multi-line box; the CLI validates after parsing and prints one line instead.)
        with contextlib.suppress(ConfigError):
            self.hidden = parse_hidden(self.hidden)

    def validate(self) -> None:
        """Raise :class:`ConfigError` (one line) for the first invalid field."""
        self.hidden = parse_hidden(self.hidden)
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"unknown precision {self.precision!r}; expected one of {', '.join(PRECISIONS)}"
            )
        positive = {
            "envs_per_actor": self.envs_per_actor,
            "total_steps": self.total_steps,
            "n_step": self.n_step,
            "batch_size": self.batch_size,
            "min_replay_size": self.min_replay_size,
            "replay_size": self.replay_size,
            "target_update_period": self.target_update_period,
            "publish_every": self.publish_every,
            "eval_every": self.eval_every,
            "eval_episodes": self.eval_episodes,
            "checkpoint_every": self.checkpoint_every,
            "actor_threads": self.actor_threads,
            "calibration_states": self.calibration_states,
            "learner_threads": self.learner_threads,
        }
        for name, v in positive.items():
            if v <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {v}")
        if self.actors < 0:
            raise ConfigError(f"--actors must be >= 0, got {self.actors}")
        if not 0 < self.gamma <= 1:
            raise ConfigError(f"--gamma must be in (0, 1], got {self.gamma}")
        if self.samples_per_insert <= 0 or self.learning_rate <= 0:
            raise ConfigError("--samples-per-insert and --learning-rate must be positive")
        if self.min_replay_size > self.replay_size:
            raise ConfigError("--min-replay-size cannot exceed --replay-size")
        if self.dueling and self.hidden[-1] % 2:
            raise ConfigError(
                f"--dueling splits the last hidden layer in two; its width must be even, "
                f"got {self.hidden[-1]} (or pass --no-dueling)"
            )
        if self.runtime not in ("ort", "numpy", "torch"):
            raise ConfigError(f"unknown runtime {self.runtime!r}")

    def uses_gptq(self) -> bool:
        """Whether publishes calibrate int8 rounding with GPTQ (see ``calibration``)."""
        if self.precision != "int8" or self.calibration == "none":
            return False
        # int8 layers are the hidden-to-hidden ones: their input widths are hidden[:-1]
        return self.calibration == "gptq" or max(self.hidden[:-1], default=0) <= 512

    def resolved_error_buffer(self) -> float:
        from actorq.replay.rate_limiter import SampleToInsertRatio

        floor = SampleToInsertRatio.min_error_buffer(
            self.batch_size, self.samples_per_insert, self.envs_per_actor * self.n_step
        )
        eb = self.error_buffer
        if eb is None:
            eb = 0.1 * self.samples_per_insert * self.min_replay_size
        return float(max(eb, floor))

    def cores_warning(self) -> str | None:
        cores = os.cpu_count() or 1
        if self.actors + 1 > cores:
            return (
                f"{self.actors} actors + 1 learner on {cores} cores: processes will share cores "
                "(fine for small policies; for throughput use actors <= cores - 1)"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DQNConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in names}
        # Runs saved before these options existed used a plain head and plain rounding.
        d.setdefault("dueling", False)
        d.setdefault("calibration", "none")
        return cls(**d)
