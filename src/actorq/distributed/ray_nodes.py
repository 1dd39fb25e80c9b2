"""The Ray cluster's nodes as the Ray backend places work on them: which nodes have CPUs, which
node each actor runs on, and pinning a task there. Shared by the backend
(:mod:`~actorq.distributed.ray_backend`) and ``--precision auto``'s per-node timing
(:mod:`~actorq.distributed.precision`), which must place exactly as the backend will.
"""

from __future__ import annotations

from typing import Any

from actorq.errors import ConfigError


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("backend 'ray' needs Ray: pip install 'actorq[distributed]'") from None
    return ray


def node_affinity(node: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)


def cpu_nodes() -> list[str]:
    """Alive nodes with CPUs, the driver's (learner's) node first."""
    ray = import_ray()
    here = ray.get_runtime_context().get_node_id()
    nodes = sorted(
        n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0
    )
    return sorted(nodes, key=lambda n: n != here)


def actor_nodes(nodes: list[str], actors: int) -> list[str]:
    """The node each actor runs on: round-robin over ``nodes`` (:func:`cpu_nodes`)."""
    return [nodes[i % len(nodes)] for i in range(actors)]
