"""The Ray cluster's nodes as the Ray backend places work on them: which nodes have CPUs, which
node each actor runs on, and pinning a task there. Shared by the backend
(:mod:`~actorq.distributed.ray_backend`) and ``--precision auto``'s per-node timing
(:mod:`~actorq.distributed.precision`), which must place exactly as the backend will.
"""

from __future__ import annotations

from typing import Any

from actorq.errors import ConfigError, first_line

#: the first lines of Ray's actor errors, which say only that something happened
_GENERIC = (
    "The actor died unexpectedly before finishing this task.",
    "The actor experienced an error before finishing this task.",
)


def ray_error_line(e: BaseException) -> str:
    """A Ray error as one line. A task's exception carries its cause: that one's first line.
    Ray sends an actor's failed ``__init__`` as text, a header, the remote traceback, then the
    exception (e.g. ``ResourceError: shared memory: no room ...``): that last line. A dead
    actor's error is a generic first line, tab-indented fields (class, id, pid, ip), then the
    reason (``Worker exit type: NODE_OUT_OF_MEMORY ...``): the reason, which the first line
    alone dropped. Ray's other errors (a lost owner) say what happened first:
    :func:`first_line`."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {first_line(cause)}"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not any(ln.startswith('File "') for ln in lines):
        return _printable(_reason(e) or first_line(e))
    line = lines[-1]
    name, sep, rest = line.partition(": ")
    if sep and "." in name and " " not in name:  # a dotted class name: its last part will do
        line = f"{name.rsplit('.', 1)[1]}: {rest}"
    return _printable(line)


def _reason(e: BaseException) -> str:
    """What a dead actor's error (``RayActorError``: it has ``error_msg``) says beyond its
    generic line and its fields, as one line; empty if nothing (no cause known)."""
    if not isinstance(getattr(e, "error_msg", None), str):
        return ""
    said = [
        ln.strip()
        for ln in str(e).splitlines()
        if ln.strip() and not ln.startswith("\t") and ln.strip() not in _GENERIC
    ]
    return " ".join(said)


def _printable(line: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in line)[:300]


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


def actor_shards(actor_node: list[str], shard_node: list[str]) -> list[int]:
    """The replay shard each actor inserts into, given the node of every actor and every shard.

    An actor takes its node's shards in turn by its place among that node's actors (not by its
    global index: with nodes round-robin, actor ``i`` on a node with shards ``local`` took
    ``local[i % len(local)]``, so on 2 nodes with 4 actors and 4 shards actors 0 and 2 both took
    shard 0 and shards 1 and 2 got nothing, never filled, and the learner sampled around them).
    The actors of a node without a shard are spread over all shards in turn."""
    local: dict[str, list[int]] = {}
    for j, node in enumerate(shard_node):
        local.setdefault(node, []).append(j)
    seen: dict[str, int] = {}
    away = 0  # actors so far on nodes without a shard
    out = []
    for node in actor_node:
        here = local.get(node)
        if here:
            k = seen.get(node, 0)
            seen[node] = k + 1
            out.append(here[k % len(here)])
        else:
            out.append(away % len(shard_node))
            away += 1
    return out
