"""The backend seam answers ``--precision auto``: the backend of the run decides where the
precisions are timed (no backend branch in the loop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from actorq.agents.dqn.builder import BUILDER
from actorq.agents.dqn.config import DQNConfig
from actorq.distributed import backend as backend_mod
from actorq.distributed.backend import PrecisionTrial, backend_class, select_precision_here
from actorq.run.precision import select_run_precision


def test_each_backend_class_answers_select_precision() -> None:
    assert backend_class(DQNConfig(actors=0)).select_precision is select_precision_here
    assert backend_class(DQNConfig(actors=2)).select_precision is select_precision_here
    ray = backend_class(DQNConfig(backend="ray", actors=2))
    assert ray.__name__ == "RayBackend" and ray.select_precision is not select_precision_here  # type: ignore[attr-defined]


class _Fake:
    seen: ClassVar[list[PrecisionTrial]] = []

    @staticmethod
    def select_precision(cfg: Any, trial: PrecisionTrial) -> tuple[str, str]:
        _Fake.seen.append(trial)
        return "fp16", "| fake table |"


def test_the_run_asks_its_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(backend_mod.BACKENDS, "local", f"{__name__}:_Fake")
    cfg = DQNConfig(actors=2, envs_per_actor=4, hidden=(16, 16), precision="auto")
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)
    pspec = BUILDER.policy_spec(cfg, spec)
    assert select_run_precision(cfg, spec, learner, pspec, tmp_path) == "fp16"
    assert (tmp_path / "precision_auto.md").read_text() == "| fake table |\n"
    (trial,) = _Fake.seen
    assert trial.observations.shape[1] == spec.obs_dim and np.isfinite(trial.observations).all()
    assert len(trial.layers) == 3 and trial.snapshot()[:1] != b""  # fp32 bytes, built on demand
    # its int8 publishes will round with GPTQ (hidden 16 <= 512): so are the candidates timed
    assert trial.gptq
    _Fake.seen.clear()
    wide = DQNConfig(actors=2, hidden=(1024, 1024), precision="auto", calibration="auto")
    select_run_precision(
        wide, spec, BUILDER.make_learner(wide, spec), BUILDER.policy_spec(wide, spec), tmp_path
    )
    assert not _Fake.seen[0].gptq  # rounded to nearest past 512 inputs, as its publishes


def test_auto_rounds_its_candidates_as_the_runs_publishes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--precision auto` judged round-to-nearest int8 while the run then published GPTQ-rounded
    snapshots (fewer flipped actions): it could fall back to fp32 wrongly near 99%."""
    import actorq.quant.autoselect as autoselect

    seen: dict[str, Any] = {}
    real = autoselect.select_precision

    def spy(*args: Any, **kw: Any) -> Any:
        seen.update(kw)
        return real(*args, **kw)

    monkeypatch.setattr(autoselect, "select_precision", spy)
    cfg, trial = _trial(gptq=True)
    select_precision_here(cfg, trial)
    assert seen["calibration"] is trial.observations


def _trial(gptq: bool = False) -> tuple[DQNConfig, PrecisionTrial]:
    """An untrained CartPole policy's auto-select trial on 64 random states."""
    cfg = DQNConfig(actors=2, envs_per_actor=4, hidden=(16, 16), precision="auto")
    spec = BUILDER.env_spec(cfg)
    learner = BUILDER.make_learner(cfg, spec)
    obs = np.random.default_rng(0).normal(size=(64, spec.obs_dim)).astype(np.float32)
    trial = PrecisionTrial(
        learner.policy_layers(), BUILDER.policy_spec(cfg, spec), learner.policy_extras(),
        lambda: b"", obs, gptq=gptq,
    )  # fmt: skip
    return cfg, trial


def test_local_timing_picks_a_known_precision() -> None:
    cfg, trial = _trial()
    precision, table = select_precision_here(cfg, trial)
    assert precision in ("fp32", "fp16", "int8", "int4") and precision in table


def test_ray_nodes_time_the_candidates_the_run_publishes(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Ray the nodes rounded int8/int4 to nearest while the run published GPTQ-rounded
    snapshots (which the local backend times): now the learner makes those and the nodes time
    them as they are."""
    import actorq.quant.autoselect as autoselect
    from actorq.distributed import precision as node_precision
    from actorq.distributed import ray_backend, wire
    from actorq.quant.snapshot import make_snapshot

    cfg, trial = _trial(gptq=True)
    sent: dict[str, Any] = {}

    def node_choices(*args: Any) -> list[node_precision.NodeChoice]:
        sent["args"] = args
        return [node_precision.NodeChoice("n", "h", 2, "int8", "| table |")]

    monkeypatch.setattr(ray_backend, "init_ray", lambda address: False)
    monkeypatch.setattr(node_precision, "node_choices", node_choices)
    ray_backend.RayBackend.select_precision(cfg, trial)
    rounded = sent["args"][8]
    assert sorted(wire.decode_batch(rounded)[0]) == ["int4", "int8"]

    timed: dict[str, dict[str, np.ndarray]] = {}
    make_runtime = autoselect.make_runtime

    def spy(snap: Any, *args: Any) -> Any:
        timed[snap.precision] = snap.tensors
        return make_runtime(snap, *args)

    def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)

    monkeypatch.setattr(autoselect, "make_runtime", spy)
    layers, extras = list(trial.layers), trial.extras
    fp32 = make_snapshot(layers, trial.spec, "fp32", 0, extras=extras).to_bytes()
    obs = wire.encode_batch({"obs": trial.observations})
    at = {"batch": 4, "runtime": cfg.runtime, "threads": 1, "granularity": cfg.granularity}
    node_precision.choice_here(fp32, obs, rounded, json.dumps(at))
    for p in ("int8", "int4"):
        gptq = make_snapshot(layers, trial.spec, p, 0, "per_channel", trial.observations, extras)
        nearest = make_snapshot(layers, trial.spec, p, 0, "per_channel", None, extras)
        assert same(timed[p], gptq.tensors) and not same(timed[p], nearest.tensors)
    assert sorted(timed) == ["fp16", "fp32", "int4", "int8"]
    # rounded to nearest by the run's publishes: nothing made on the learner
    _, nearest_trial = _trial(gptq=False)
    ray_backend.RayBackend.select_precision(cfg, nearest_trial)
    assert wire.decode_batch(sent["args"][8])[0] == {}


def test_ray_nodes_time_a_pixel_policys_own_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Ray, `--precision auto` ignored the snapshots a policy exported whole (the
    convolutional actors) makes: each node read the fp32 ONNX model as an MLP snapshot and the
    run failed. The nodes now time those snapshots, on frames kept as bytes."""
    import torch

    from actorq.agents.dqn.networks import NatureQNetwork
    from actorq.agents.pixels import pixel_snapshot
    from actorq.distributed import precision as node_precision
    from actorq.distributed import ray_backend
    from actorq.types import ArraySpec, EnvSpec

    torch.manual_seed(1)
    spec = EnvSpec("gym:t", ArraySpec((4, 36, 36), "uint8"), ArraySpec((), "int64"), 2)
    frames = np.random.default_rng(0).integers(0, 256, (16, 4, 36, 36), dtype=np.uint8)
    net = NatureQNetwork((4, 36, 36), 2)
    snaps = {p: pixel_snapshot(net, 0, spec, "q", p, frames).to_bytes() for p in ("fp32", "int8")}
    trial = PrecisionTrial([], None, {}, lambda: snaps["fp32"], frames, models=lambda: snaps)

    class _Task:  # a Ray task run here, its answer as the node's JSON
        def options(self, **kw: Any) -> _Task:
            return self

        def remote(self, *args: Any) -> str:
            got = node_precision.choice_here(*args)
            timed.append(got)
            return json.dumps({"host": "h", "precision": got.precision, "table": got.table()})

    timed: list[Any] = []
    fake = type("Ray", (), {"remote": staticmethod(lambda fn: _Task()), "get": lambda r: r})
    monkeypatch.setattr(node_precision, "import_ray", lambda: fake)
    monkeypatch.setattr(node_precision, "cpu_nodes", lambda: ["node-a"])
    monkeypatch.setattr(node_precision, "node_affinity", lambda node: node)
    monkeypatch.setattr(ray_backend, "init_ray", lambda address: False)
    cfg = DQNConfig(backend="ray", actors=2, envs_per_actor=4, precision="auto")
    precision, table = ray_backend.RayBackend.select_precision(cfg, trial)
    (choice,) = timed
    assert {c.precision for c in choice.candidates} == {"fp32", "int8"}
    assert precision in ("fp32", "int8") and "node-a" in table
