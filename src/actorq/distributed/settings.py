"""The Ray backend's settings: a group of every agent's config that only ``--backend ray``
brings to the command line (a local run's ``--help`` does not list them). Light on purpose:
no Ray import, so every config can hold the group.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from actorq.settings import Bound


@dataclasses.dataclass
class RaySettings:
    """--backend ray: the cluster, its replay shards and its parameter cache tier."""

    bounds: ClassVar[dict[str, Bound]] = {
        "replay_shards": Bound(1, 4096),
        "cache_relays": Bound(0, 4096),
        "actor_cpus": Bound(0, 1024, lo_open=True),
    }

    ray_address: str | None = None
    """The cluster to join ("auto", "ray://host:10001", "host:6379"); default: start Ray on
    this machine."""
    replay_shards: int = 2
    """Replay shards (Ray actors, each with its own share of the rate limiter); actors insert
    into a shard on their node, the learner samples from all. At most one per actor (a shard
    nobody inserts into would never fill)."""
    cache: Literal["node", "none"] = "node"
    """How snapshots reach actors. node: published once, one cache per node, actors read their
    node's shared memory. none: every actor pulls from a parameter server on the learner's
    node (to measure what a cache saves)."""
    cache_relays: int = 0
    """With --cache node: relay caches between the learner and the node caches (Menger's
    hierarchy); the learner then sends each snapshot once per relay instead of once per node."""
    actor_cpus: float = 0.5
    """CPUs Ray reserves per actor; fractional, so several actors share a core."""


@dataclasses.dataclass
class OffPolicyRaySettings(RaySettings):
    """--backend ray: the cluster, its replay shards and its parameter cache tier."""

    bounds: ClassVar[dict[str, Bound]] = {"prefetch": Bound(1, 1024)}

    prefetch: int = 4
    """Learner batches fetched ahead by a background thread (bounded queue)."""
