"""Reading a run directory: its validated config and its checkpointed policy.

A run directory (``actorq train ... --run-dir DIR``) holds ``config.json``, ``checkpoint/``,
``metrics.csv`` and ``summary.json``. Every reader of a finished or interrupted run goes through
here: ``actorq eval``/``export``, ``actorq chip place --method policy``, ``actorq graphopt
place --policy RUN``, ``--resume``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actorq import checkpoint as ckpt
from actorq.agents import AGENTS, builder_for, config_class
from actorq.agents.policy_io import ModelPolicyIO, PolicyIO
from actorq.config import ExperimentConfig
from actorq.errors import (
    ActorQError,
    CheckpointError,
    ConfigError,
    SnapshotError,
    first_line,
    shown,
)
from actorq.quant.runtimes import AnySnapshot, decode_any, same_layout
from actorq.run.memory import check_policy_memory
from actorq.rundir import RunDir


def load_run_config(run_dir: Path, device: str | None = None) -> ExperimentConfig:
    """A run directory's config.json, validated. ``device``: where the caller builds the learner
    instead of the run's (readers of a run's policy pass ``"cpu"``: a run trained on a GPU is
    evaluated, exported and placed with on a machine without one)."""
    run = RunDir(run_dir)
    return run_config_from_json(run, run.read_config_json(), device)


def run_config_from_json(
    run: RunDir, d: dict[str, Any], device: str | None = None
) -> ExperimentConfig:
    """:func:`load_run_config` for a config.json already read (as ``d``) from ``run``: a resume
    reads the file once, for the config and for the device it trained on."""
    run_dir, path = run.path, run.config_file
    try:
        agent = d.get("agent", "dqn")  # runs from before D4PG were all DQN
        if not isinstance(agent, str) or agent not in AGENTS:
            raise CheckpointError(f"{path}: unknown agent {agent!r}")
        if str(d.get("env", "")).startswith("atari:"):  # before EnvPool, every game was ale's
            d = {"atari_engine": "ale", **d}
        cls = config_class(agent)
        # an older actorq took "" for "not given" (a Ray address: a local cluster): read so
        d = {**d, **{k: None for k in cls.named_places if d.get(k) == ""}}
        if isinstance(d.get("energy_country"), str):  # saved before codes had to be capitals
            d = {**d, "energy_country": d["energy_country"].upper()}
        cfg = cls.from_json({**cls.saved_run_defaults, **d})  # what an older run ran with
    except ConfigError as e:  # e.g. a retired setting at a value it no longer has
        raise CheckpointError(f"{path}: {e}") from None
    except (TypeError, AttributeError, ValueError) as e:
        raise CheckpointError(f"corrupt config.json in {run_dir}: {first_line(e)}") from None
    if device is not None:
        cfg.device = device
    try:
        cfg.validate()
    except ConfigError as e:
        raise CheckpointError(f"{path}: {e}") from None
    return cfg


def load_run_policy(
    run_dir: str,
    precision: str | None,
    runtime: str | None = None,
    require: Callable[[ExperimentConfig], None] | None = None,
    which: str = "latest",
) -> tuple[ExperimentConfig, PolicyIO, bytes]:
    """A run's config (evaluating with ``runtime`` if given), its policy seam, and its
    checkpointed policy as snapshot bytes (``actorq eval``, ``actorq export``, ``actorq chip
    place --method policy``). ``which``: the ``"latest"`` checkpoint or the ``"best"`` policy
    the run's evaluations kept. ``require(cfg)`` may refuse the run (raising an
    :class:`ActorQError`) before its checkpoint is read."""
    rd = Path(run_dir)
    try:
        found = rd.is_dir()
    except OSError as e:  # a name too long, a directory we may not look into
        raise ActorQError(f"cannot read run directory {shown(rd)}: {e.strerror}") from None
    if not found:
        raise ActorQError(RunDir(rd).not_a_directory() or f"run directory not found: {shown(rd)}")
    # validated (config.json is input too); the learner only holds weights here: on the CPU
    cfg = load_run_config(rd, device="cpu")
    if require is not None:
        require(cfg)
    if runtime is not None and runtime != cfg.runtime:
        cfg.runtime = runtime  # type: ignore[assignment]
        cfg.validate()  # e.g. a policy exported whole runs in onnxruntime only
    builder = builder_for(cfg)
    where = RunDir(rd).policy_checkpoint(which)
    # one read of one directory: beside a live run, the snapshot is these weights' own
    tensors, state, _, snapshot = ckpt.read(where)
    spec = builder.env_spec(cfg)
    check_policy_memory(cfg, spec)
    learner = builder.make_learner(cfg, spec)
    try:
        learner.load_state(tensors, state["learner"])
        version = int(state["counters"]["version"])
    except Exception as e:  # e.g. weights of another width than config.json says
        raise CheckpointError(
            f"checkpoint in {rd} does not match its config.json: {first_line(e)}"
        ) from None
    io = builder.policy_io(cfg, spec, learner)
    if not io.is_finite():
        raise SnapshotError(f"the policy in {rd} has NaN or infinite weights (a diverged run)")
    if precision == "auto":
        raise ActorQError(
            "precision 'auto' chooses while training; a run's policy is read at fp32, fp16, "
            "int8 or int4 (default: the precision its run chose)"
        )
    precision = cfg.precision if precision is None else precision
    if precision != cfg.precision:  # what this policy is published at (a chip or GO one:
        dataclasses.replace(cfg, precision=precision).validate()  # fp32, int8)
    if precision == "auto":  # a run saves the precision it chose: a config.json edited since
        raise CheckpointError(
            f"{shown(rd / 'config.json')}: precision 'auto' was never resolved; pass --precision"
        )
    calibration = None
    if isinstance(io, ModelPolicyIO) and io.calibration_states(precision):
        # a convolutional int8 policy's activation ranges: replay is not at hand here, so
        # states of random play calibrate it (seeded: the same snapshot every time)
        from actorq.run.precision import random_states

        n = io.calibration_states(precision)
        calibration = random_states(cfg, spec, n)[:n]
    fresh = io.snapshot(version, precision, calibration)
    saved = saved_snapshot(where, state, precision, fresh, snapshot)
    return cfg, io, fresh if saved is None else saved[0]


def saved_snapshot(
    where: Path, state: dict[str, Any], precision: str, made: bytes, data: bytes | None
) -> tuple[bytes, AnySnapshot] | None:
    """The snapshot the run's actors ran, decoded, where the checkpoint in ``where`` (``state``,
    ``data``: its state and its :data:`~actorq.checkpoint.SNAPSHOT` file) keeps one of
    ``precision`` (its rounding or activation ranges were calibrated on replay states: made
    again they would differ). One line if it does not fit the run's policy, compared with
    ``made`` (one made now from the weights) by layers, shapes and precision, not bytes: a
    snapshot's header grows with its calibration's record."""
    record = state.get("snapshot")
    if not isinstance(record, dict) or record.get("precision") != precision:
        return None
    if data is None:
        raise CheckpointError(f"checkpoint in {shown(where)} lacks the {ckpt.SNAPSHOT} it names")
    try:
        saved = decode_any(data)
    except SnapshotError as e:
        saved, why = None, f"it does not decode: {e}"
    else:
        why = "its layers, shapes or precision differ"
    if saved is None or not same_layout(saved, decode_any(made)):
        raise CheckpointError(
            f"{shown(where / ckpt.SNAPSHOT)} does not fit the run's policy ({why})"
        )
    return data, saved
