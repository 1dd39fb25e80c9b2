"""Three Ray nodes on one machine (ray.cluster_utils.Cluster): every actor reads the snapshot
from its own node's cache, and the learner's snapshot egress is once per node per publish, not
once per actor."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
# one Ray cluster at a time: with `pytest -n 2` (make test) these run on one worker, in order
pytestmark = pytest.mark.xdist_group("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from actorq import DQNConfig  # noqa: E402
from actorq.agents import builder_for  # noqa: E402
from actorq.distributed.backend import BackendContext  # noqa: E402
from actorq.distributed.ray_backend import RayBackend  # noqa: E402
from actorq.envs import env_spec  # noqa: E402
from actorq.quant.snapshot import make_snapshot  # noqa: E402

NODES, ACTORS, PUBLISHES = 3, 6, 3


@pytest.fixture(scope="module")
def cluster() -> Any:
    c = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    for _ in range(NODES - 1):
        c.add_node(num_cpus=1)
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def test_each_node_reads_its_own_cache(cluster: Any, tmp_path: Path) -> None:
    cfg = DQNConfig(
        env="gym:CartPole-v1",
        precision="int8",
        hidden=(512, 512),
        actors=ACTORS,
        envs_per_actor=2,
        backend="ray",
        replay_shards=NODES,
        actor_cpus=0.3,
        cache="node",
    )
    cfg.validate()
    builder = builder_for(cfg)
    spec = env_spec(cfg.env)
    learner = builder.make_learner(cfg, spec)
    pspec = builder.policy_spec(cfg, spec)
    snaps = [
        make_snapshot(learner.policy_layers(), pspec, "int8", v).to_bytes()
        for v in range(1, PUBLISHES + 1)
    ]
    ctx = BackendContext(
        cfg,
        builder.actor_setup(cfg, spec),
        builder.data_specs(cfg, spec),
        builder.table_config(cfg, spec),
        len(snaps[0]) * 2,
        tmp_path,
        np.random.default_rng(0),
    )
    backend = RayBackend(ctx)
    try:
        infos: list[dict[str, Any]] = []
        for v, data in enumerate(snaps, start=1):
            backend.publish(v, data)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                infos = backend.actor_info()
                if all(i.get("version") == v for i in infos):
                    break
                time.sleep(0.2)
            assert all(i.get("version") == v for i in infos), [
                (i.get("version"), i.get("cache"), i.get("env_steps")) for i in infos
            ]
        assert len({i["node"] for i in infos}) == NODES  # actors spread over every node
        for i in infos:
            assert i["cache"] == i["node"]  # each reads its own node's cache
            assert i["torch_imported"] is False
        caches = [
            json.loads(c) for c in ray.get([c.info.remote() for c in backend.tier.caches.values()])
        ]
        assert sorted(c["node"] for c in caches) == sorted({i["node"] for i in infos})
        # learner egress: each node's cache pulled each snapshot exactly once
        assert [c["pulls"] for c in caches] == [PUBLISHES] * NODES
        egress = backend.tier.egress()["comm/learner_egress_bytes"]
        assert egress == NODES * sum(len(s) for s in snaps)
        assert egress < ACTORS * sum(len(s) for s in snaps)
    finally:
        backend.close()


def test_a_relay_level_stacks_in_front_of_node_caches(cluster: Any) -> None:
    """Menger's hierarchy: learner → relay → node caches. The learner's egress per publish is
    one copy per relay; every node cache still gets every version."""
    from actorq.distributed.ray_backend import ParameterTier, cpu_nodes

    nodes = cpu_nodes()
    tier = ParameterTier("node", nodes, 1 << 20, "relaytest", relays=1)
    try:
        blobs = [bytes([v]) * 300_000 for v in (1, 2)]
        for v, blob in enumerate(blobs, start=1):
            tier.publish(v, blob)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            caches = [
                json.loads(c) for c in ray.get([c.info.remote() for c in tier.caches.values()])
            ]
            if all(c["version"] == 2 for c in caches):
                break
            time.sleep(0.1)
        assert [c["version"] for c in caches] == [2] * NODES
        assert tier.egress()["comm/learner_egress_bytes"] == sum(len(b) for b in blobs)
    finally:
        tier.close()


def test_auto_precision_is_measured_on_every_actor_node(cluster: Any) -> None:
    from actorq.distributed.precision import node_choices, vote
    from actorq.quant.formats import PRECISIONS
    from actorq.quant.snapshot import PolicySpec

    spec = PolicySpec(4, (128, 128), 2)
    rng = np.random.default_rng(0)
    layers = [
        (rng.standard_normal((a, b)).astype(np.float32) / np.sqrt(a), np.zeros(b, np.float32))
        for a, b in zip(spec.dims[:-1], spec.dims[1:], strict=True)
    ]
    fp32 = make_snapshot(layers, spec, "fp32", 0).to_bytes()
    obs = rng.standard_normal((256, 4)).astype(np.float32)
    choices = node_choices(fp32, obs, 4, 2, "ort", 1, "per_channel", 0.3)
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert {c.node for c in choices} == alive  # one measurement on each node, there
    assert sorted(c.actors for c in choices) == [1, 1, 2]  # round-robin, as the backend places
    assert all(c.precision in PRECISIONS and "| fp32 |" in c.table for c in choices)
    assert vote(choices) in {c.precision for c in choices}
