"""Learned systems optimization's world (GO: Zhou et al., NeurIPS 2020).

Computation graphs (:mod:`~actorq.graphopt.ir`), a suite of real model graphs traced from PyTorch
(:mod:`~actorq.graphopt.suite`, :mod:`~actorq.graphopt.importer`) and seeded synthetic ones
(:mod:`~actorq.graphopt.synthetic`), a cluster model (:mod:`~actorq.graphopt.cluster`), an
event-driven execution simulator (:mod:`~actorq.graphopt.simulator`), Gymnasium environments for
placement, scheduling and fusion (:mod:`~actorq.graphopt.envs`, ``make_env("graphopt:...")``) and
the classical baselines (:mod:`~actorq.graphopt.baselines`). Needs the ``[graph]`` extra for
METIS and the compiled simulator. Importing this package does not import torch; only the
importer and the suite's graph builder do.
"""

from __future__ import annotations

from actorq.graphopt.cluster import Cluster, Device, get_cluster
from actorq.graphopt.ir import Graph, load_graph, make_graph
from actorq.graphopt.simulator import SimResult, Simulator, simulate

__all__ = [
    "Cluster",
    "Device",
    "Graph",
    "SimResult",
    "Simulator",
    "get_cluster",
    "load_graph",
    "make_graph",
    "simulate",
]
