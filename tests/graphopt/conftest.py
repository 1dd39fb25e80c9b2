"""Shared helpers: a round-number cluster so simulated times can be checked by hand."""

from __future__ import annotations

from typing import Any

from actorq.graphopt.cluster import Cluster, cluster_from_dict


def unit_cluster(
    devices: int = 2,
    *,
    overhead: float = 0.0,
    memory: float = 1e6,
    bandwidth: float = 1.0,
    latency: float = 0.5,
) -> Cluster:
    """Devices at 1 FLOP/s and 1 B/s (an op takes max(flops, bytes) seconds + overhead); links
    at ``bandwidth`` B/s with ``latency`` s."""
    dev: dict[str, Any] = {"flop_s": 1.0, "mem_bw": 1.0, "memory": memory, "op_overhead": overhead}
    return cluster_from_dict(
        {"devices": [dev] * devices, "link": {"bandwidth": bandwidth, "latency": latency}},
        name=f"unit{devices}",
    )
