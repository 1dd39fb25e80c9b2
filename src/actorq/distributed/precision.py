"""``--precision auto`` under Ray: each actor node times the candidate runtimes on its own hardware.

Which snapshot precision makes actors fastest depends on the machine that runs them: QuaRL
(Lam et al., TMLR 2022) measured int8 actors several times faster than fp32 on its actors' CPUs,
while on CPUs without fast integer dot products, or for narrow policies, int8 can be slower
(docs/results.md). :func:`actorq.quant.autoselect.select_precision` measures this in the process
that calls it; on the local backend that is the actors' machine. Under Ray the actors may run on
other machines, so here a short Ray task placed on every node that will host actors (exactly as
the backend places them: :func:`~actorq.distributed.ray_nodes.actor_nodes`) runs the same
measurement there, with the actors' runtime, threads and batch (envs per actor).

One precision is published per snapshot (one broadcast, Menger-style), so the nodes' choices are
combined by :func:`vote`: the precision chosen by the nodes hosting the most actors; a tie goes
to the higher precision (less rounding). Every node's table and the vote are logged.

Where the run's publishes round int8/int4 with GPTQ, the learner makes those candidates
(:func:`gptq_candidates`; GPTQ needs torch, the nodes need not have it) and the nodes time them
as they are, as the local backend times its GPTQ-rounded candidates.

A policy exported whole (the convolutional actors' ONNX models) is timed as the local backend
times it: the learner makes one snapshot per precision the run can publish (``trial.models``)
and the nodes run those (:func:`~actorq.quant.autoselect.select_model_precision`). Before, the
nodes read the fp32 model as an MLP snapshot, and a pixel run's ``--precision auto`` failed.

Only bytes and strings cross Ray: the fp32 snapshot as its safetensors bytes, the observations
(in their own dtype: frames stay bytes), the rounded candidates and the models as safetensors
blobs, the answer as JSON.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from actorq.distributed import wire
from actorq.distributed.ray_nodes import (
    actor_nodes,
    cpu_nodes,
    import_ray,
    node_affinity,
    ray_error_line,
)
from actorq.errors import ActorQError
from actorq.quant.formats import PRECISIONS, weight_format

if TYPE_CHECKING:  # the node's task imports this module: nothing it does not need
    from actorq.distributed.backend import PrecisionTrial
    from actorq.quant.autoselect import PrecisionChoice

#: ties go to the first: most bits first
_ORDER = {p: i for i, p in enumerate(PRECISIONS)}


@dataclass(frozen=True)
class NodeChoice:
    node: str
    host: str
    actors: int  # actors the backend will place on this node
    precision: str
    table: str  # the node's select_precision table (markdown)


def gptq_candidates(trial: PrecisionTrial, granularity: str) -> bytes:
    """The calibrated precisions' candidates (int8, int4) rounded with GPTQ on the trial's
    states, as the run's publishes will round them, made here on the learner (GPTQ needs
    torch; the actors' nodes need not have it): one safetensors blob, a uint8 array per
    precision. No candidate when the publishes round to nearest (``trial.gptq`` false)."""
    from actorq.quant.snapshot import make_snapshot

    made: dict[str, np.ndarray] = {}
    for p in PRECISIONS:
        if trial.gptq and weight_format(p).calibrated:
            snap = make_snapshot(
                list(trial.layers), trial.spec, p, 0, cast(Any, granularity),
                trial.observations, trial.extras,
            )  # fmt: skip
            made[p] = np.frombuffer(snap.to_bytes(), np.uint8)
    return wire.encode_batch(made)


def models_blob(trial: PrecisionTrial) -> bytes:
    """A whole-model policy's snapshots, one per precision (``trial.models``), as one
    safetensors blob (a uint8 array each); none for an MLP policy."""
    models = trial.models() if trial.models is not None else {}
    return wire.encode_batch({p: np.frombuffer(b, np.uint8) for p, b in models.items()})


def choice_here(
    snapshot: bytes, observations: bytes, rounded: bytes, settings: str, models: bytes = b""
) -> PrecisionChoice:
    """The node's choice: :func:`~actorq.quant.autoselect.select_precision` on the fp32
    snapshot at the actors' ``settings`` (JSON: batch, runtime, threads, granularity), the
    learner's :func:`gptq_candidates` timed as they are; for a policy exported whole
    (``models``: :func:`models_blob`), :func:`~actorq.quant.autoselect.select_model_precision`
    on those snapshots, as the local backend. Imports no torch."""
    from actorq.quant.autoselect import select_model_precision, select_precision
    from actorq.quant.snapshot import PolicySnapshot

    at = json.loads(settings)
    obs = wire.decode_batch(observations)[0]["obs"]
    whole = wire.decode_batch(models)[0] if models else {}
    if whole:
        snaps = {p: a.tobytes() for p, a in whole.items()}
        return select_model_precision(snaps, obs, int(at["batch"]), threads=int(at["threads"]))
    candidates = wire.decode_batch(rounded)[0]
    made = {p: PolicySnapshot.from_bytes(a.tobytes()) for p, a in candidates.items()}
    return select_precision(
        PolicySnapshot.from_bytes(snapshot),
        obs,
        int(at["batch"]),
        runtime=str(at["runtime"]),
        threads=int(at["threads"]),
        granularity=at["granularity"],
        made=made,
    )


def _choose_here(
    snapshot: bytes, observations: bytes, rounded: bytes, settings: str, models: bytes
) -> str:
    """Runs on the node (a Ray task; bytes and str in, JSON out): :func:`choice_here`."""
    import ray

    choice = choice_here(snapshot, observations, rounded, settings, models)
    return json.dumps(
        {
            "node": ray.get_runtime_context().get_node_id(),
            "host": socket.gethostname(),
            "precision": choice.precision,
            "table": choice.table(),
        }
    )


def vote(choices: list[NodeChoice]) -> str:
    """The precision of the nodes hosting the most actors; a tie goes to the higher precision."""
    if not choices:
        raise ValueError("no node choices to combine")
    weight: Counter[str] = Counter()
    for c in choices:
        weight[c.precision] += c.actors
    return min(weight, key=lambda p: (-weight[p], _ORDER.get(p, len(_ORDER))))


def node_choices(
    fp32_snapshot: bytes,
    observations: np.ndarray,
    actors: int,
    batch: int,
    runtime: str,
    threads: int,
    granularity: str,
    task_cpus: float,
    rounded: bytes | None = None,
    models: bytes = b"",
) -> list[NodeChoice]:
    """Run the measurement on every node that will host actors (Ray must be initialized);
    ``rounded``: :func:`gptq_candidates`, timed as they are; ``models``: :func:`models_blob`."""
    ray = import_ray()
    per_node = Counter(actor_nodes(cpu_nodes(), actors))  # where the backend will put them
    obs = wire.encode_batch({"obs": np.ascontiguousarray(observations)})  # frames stay bytes
    rounded = rounded or wire.encode_batch({})
    settings = json.dumps(
        {"batch": batch, "runtime": runtime, "threads": threads, "granularity": granularity}
    )
    fn = ray.remote(_choose_here)
    refs = {
        node: fn.options(
            num_cpus=task_cpus, scheduling_strategy=node_affinity(node), max_retries=0
        ).remote(fp32_snapshot, obs, rounded, settings, models)
        for node in per_node
    }
    out = []
    for node, ref in refs.items():
        try:
            d: dict[str, Any] = json.loads(ray.get(ref))
        except Exception as e:  # a node that cannot run the actors' runtime: say which, briefly
            msg = f"--precision auto: measuring on node {node[:12]} failed: {ray_error_line(e)}"
            raise ActorQError(msg) from None
        out.append(NodeChoice(node, d["host"], per_node[node], d["precision"], d["table"]))
    return out


def report(choices: list[NodeChoice], chosen: str) -> str:
    """Markdown: the vote, then every node's table."""
    lines = [
        f"precision auto-select on {len(choices)} actor node(s): {chosen} "
        "(the precision of the nodes hosting the most actors)",
        "",
        "| node | host | actors | node's choice |",
        "|---|---|---|---|",
    ]
    lines += [f"| {c.node[:12]} | {c.host} | {c.actors} | {c.precision} |" for c in choices]
    for c in choices:
        lines += ["", f"### node {c.node[:12]} ({c.host})", "", c.table]
    return "\n".join(lines)
