"""GO policies as files: the placement policy shipped with actorq, saving and loading one.

A policy file is one safetensors file: the :class:`~actorq.agents.go.networks.GOPolicy` weights,
and in its metadata header the network's sizes (:class:`GOPolicyConfig`), the task and cluster
it was trained for, the graphs it was trained on and the command that trained it. safetensors
holds tensors and a string map only (nothing is unpickled); reading one validates everything
before any weight is used: a file that is not safetensors, metadata that is not ours, sizes out
of range, a missing or misshapen tensor, or a non-finite weight is one
:class:`~actorq.errors.GraphError` line.

``actorq graphopt place`` uses the shipped policy for the cluster's device count when no
``--policy`` is given (``actorq/agents/go/pretrained/go-placement-<N>dev.safetensors``, trained by
``benchmarks/go_pretrained.py``); a GO run directory (``actorq train go``) or a policy file works
too.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actorq.config import ARCHIVE_COMMIT
from actorq.errors import ActorQError, GraphError, first_line, short, shown
from actorq.inputs import is_dir, is_file, load_json

if TYPE_CHECKING:
    from actorq.agents.go.networks import GOPolicy
    from actorq.config import ExperimentConfig

FORMAT = "actorq-go-policy"
FORMAT_VERSION = "1"
#: Largest policy file read (the shipped ones are well under 1 MB; the issue's bound is 10 MB).
MAX_BYTES = 64 * 2**20
#: Bounds on every size in a file's config: a hostile header cannot make a huge network.
_SIZE_BOUNDS: dict[str, tuple[int, int]] = {
    "num_devices": (1, 64),
    "hidden": (1, 1024),
    "sage_layers": (0, 16),
    "attn_layers": (0, 16),
    "heads": (1, 64),
    "segment": (1, 4096),
    "ffn": (1, 4096),
    "type_dim": (1, 256),
    "task_dim": (1, 256),
    "priority_levels": (1, 256),
    "pos_freqs": (0, 30),
}
#: The config's switches (JSON booleans).
_FLAGS = ("memory_input",)
#: Inputs a policy file of an earlier release may switch on, retired after their experiments
#: (docs/go-transfer.md, "What was tried"): off, the key is dropped; on, the file is refused.
_RETIRED_SWITCHES = {"start_input": "--start", "cost_input": "--cost-input"}
_META_KEYS = ("format", "format_version", "config", "task", "cluster", "trained_on", "command")


@dataclasses.dataclass(frozen=True)
class PolicyInfo:
    """What a policy file says about itself."""

    source: str
    task: str
    cluster: str
    trained_on: tuple[str, ...]
    command: str
    reference: str = "expert"
    """The reference decision it was trained against: the placement task takes the parts it
    does not decide (the priorities: the schedule) from it, so ``place`` judges with it too.
    Files from before the key: ``expert``."""


def shipped_path(num_devices: int) -> Path:
    """Where the shipped placement policy for ``num_devices`` devices lives (it may not)."""
    return Path(__file__).parent / "pretrained" / f"go-placement-{num_devices}dev.safetensors"


def shipped_device_counts() -> list[int]:
    """Device counts for which a placement policy ships with actorq."""
    found = []
    for p in (Path(__file__).parent / "pretrained").glob("go-placement-*dev.safetensors"):
        n = p.name[len("go-placement-") : -len("dev.safetensors")]
        if n.isdigit():
            found.append(int(n))
    return sorted(found)


def save_policy(
    model: GOPolicy,
    path: Path,
    *,
    task: str,
    cluster: str,
    trained_on: list[str],
    command: str,
    reference: str = "expert",
) -> Path:
    """Write ``model`` as a policy file, whole or not at all (:func:`actorq.output.write_output`:
    a fresh exclusive temporary file, fsync'd and renamed; never through a link left at a
    predictable ``NAME.tmp``)."""
    from safetensors.torch import save

    from actorq.output import write_output

    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": json.dumps(dataclasses.asdict(model.config)),
        "task": task,
        "cluster": cluster,
        "trained_on": json.dumps(list(trained_on)),
        "command": command,
        "reference": reference,
        "start": "none",  # the retired start input's key, for readers that expect it
    }
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    write_output(path, save(tensors, metadata=meta), "policy file", error=GraphError)
    return path


def _policy_config(raw: Any, where: str) -> Any:
    from actorq.agents.go.networks import GOPolicyConfig

    if not isinstance(raw, dict):
        raise GraphError(f"{where}: its policy config is not a JSON object")
    raw = dict(raw)
    for switch, knob in _RETIRED_SWITCHES.items():
        if switch in raw and raw.pop(switch) is not False:
            raise GraphError(
                f"{where}: its policy reads an input that was retired ({knob}, "
                f"docs/go-transfer.md); run it from commit {ARCHIVE_COMMIT}"
            )
    fields = {f.name for f in dataclasses.fields(GOPolicyConfig)}
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise GraphError(f"{where}: unknown policy config key {short(unknown[0])}")
    for k, v in raw.items():
        if k in _FLAGS:
            if not isinstance(v, bool):
                raise GraphError(f"{where}: policy config {k}={short(v)} (must be true or false)")
            continue
        lo, hi = _SIZE_BOUNDS[k]
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise GraphError(f"{where}: policy config {k}={short(v)} (must be an int {lo}..{hi})")
    try:
        return GOPolicyConfig(**raw)
    except ValueError as e:
        raise GraphError(f"{where}: {first_line(e)}") from None


def _checked_model(config: Any, tensors: dict[str, Any], where: str) -> GOPolicy:
    """A GOPolicy of ``config`` holding ``tensors``, which must be exactly its state, finite."""
    import torch

    from actorq.agents.go.networks import GOPolicy

    model = GOPolicy(config)
    want = model.state_dict()
    for k, v in want.items():
        got = tensors.get(k)
        if got is None:
            raise GraphError(f"{where}: tensor {k!r} is missing")
        if tuple(got.shape) != tuple(v.shape) or got.dtype != v.dtype:
            raise GraphError(
                f"{where}: tensor {k!r} is {tuple(got.shape)} {got.dtype}, expected "
                f"{tuple(v.shape)} {v.dtype}"
            )
        if not bool(torch.isfinite(got).all()):
            raise GraphError(f"{where}: tensor {k!r} holds NaN or Inf")
    extra = sorted(set(tensors) - set(want))
    if extra:
        raise GraphError(f"{where}: unexpected tensor {short(extra[0])}")
    model.load_state_dict({k: tensors[k] for k in want})
    model.eval()
    return model


def load_policy_file(path: Path) -> tuple[GOPolicy, PolicyInfo]:
    """A policy file, validated (one :class:`GraphError` line otherwise)."""
    from safetensors import safe_open

    where = f"--policy {shown(path)}"
    if not is_file(path, where, GraphError):
        raise GraphError(f"{where}: no such file")
    if path.stat().st_size > MAX_BYTES:
        raise GraphError(f"{where}: {path.stat().st_size:,} bytes (more than {MAX_BYTES:,})")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not a dict)
    except Exception as e:  # safetensors raises its own, OSError or ValueError on bad bytes
        raise GraphError(
            f"{where}: not a readable safetensors file ({first_line(e, 160)})"
        ) from None
    if meta.get("format") != FORMAT:
        fmt = short(meta.get("format"))
        raise GraphError(f"{where}: not an actorq GO policy file (format {fmt})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise GraphError(
            f"{where}: format version {short(meta.get('format_version'))} (this actorq reads "
            f"{FORMAT_VERSION})"
        )
    missing = [k for k in _META_KEYS if k not in meta]
    if missing:
        raise GraphError(f"{where}: metadata lacks {missing[0]!r}")
    raw_config = load_json(meta["config"], f"{where}: corrupt metadata config", GraphError)
    trained_on = load_json(meta["trained_on"], f"{where}: corrupt metadata trained_on", GraphError)
    if not isinstance(trained_on, list) or not all(isinstance(g, str) for g in trained_on):
        raise GraphError(f"{where}: metadata trained_on is not a list of graph names")
    from actorq.agents.go.actor import TASK_HEADS

    if meta["task"] not in TASK_HEADS:
        raise GraphError(f"{where}: unknown task {short(meta['task'])}")
    from actorq.graphopt.baselines import REFERENCES

    reference = meta.get("reference", "expert")
    if reference not in REFERENCES:
        raise GraphError(f"{where}: metadata reference {short(reference)} is not a baseline")
    from actorq.agents.go.config import retired_why

    config = _policy_config(raw_config, where)
    if meta.get("start", "none") != "none":
        raise GraphError(
            f"{where}: its policy decides from a start placement ({retired_why('start')})"
        )
    model = _checked_model(config, tensors, where)
    info = PolicyInfo(
        str(path),
        meta["task"],
        meta["cluster"],
        tuple(trained_on),
        meta["command"],
        reference,
    )
    return model, info


def load_policy_run(run: Path, cfg: ExperimentConfig) -> tuple[GOPolicy, PolicyInfo]:
    """The final policy of a GO run directory (``actorq train go``), validated; ``cfg`` is the
    run's config as :func:`actorq.run.load_run_config` read it (the caller reads it: an agent
    does not open run directories itself)."""
    from actorq.agents.go.config import GOConfig
    from actorq.agents.go.learning import policy_config, run_policy_tensors
    from actorq.graphopt.cluster import get_cluster

    where = f"--policy {shown(run)}"
    try:
        if not isinstance(cfg, GOConfig):
            raise GraphError(f"{where}: a {cfg.agent} run, not a GO run (actorq train go)")
        config = policy_config(cfg, get_cluster(cfg.cluster).num_devices)
    except GraphError:
        raise
    except ActorQError as e:
        raise GraphError(f"{where}: {first_line(e)}") from None
    try:
        weights = run_policy_tensors(run, "--policy")  # its errors name --policy already
    except ActorQError as e:
        raise GraphError(first_line(e)) from None
    model = _checked_model(config, weights, where)
    graphs = [cfg.env.split("/", 1)[-1], *cfg.graphs]
    info = PolicyInfo(
        str(run),
        cfg.task(),
        cfg.cluster,
        tuple(graphs),
        f"actorq train go ({run})",
        cfg.reference,
    )
    return model, info


def run_best_placement(
    run: Path, cfg: ExperimentConfig, graph: str, num_ops: int, cluster: str, reference: str
) -> Any:
    """The best placement GO run ``run`` (its config ``cfg``) found for ``graph`` while training
    the placement task on it on ``cluster`` with ``reference`` (its self-imitation target; with
    ``--explore``, its search result), as per-op devices ``(n,)`` int64; None if the run did
    not train that (another task, cluster, reference or graph, or no decision kept yet). A
    checkpoint whose kept decision is misshapen or out of range is one :class:`GraphError`
    line."""
    import numpy as np

    from actorq.agents.go.config import GOConfig
    from actorq.graphopt.cluster import get_cluster
    from actorq.rundir import RunDir

    where = f"--policy {shown(run)}"
    try:
        if not isinstance(cfg, GOConfig) or cfg.task() != "placement":
            return None
        nd = get_cluster(cfg.cluster).num_devices
        if get_cluster(cfg.cluster).name != cluster or cfg.reference != reference:
            return None
        tensors, state, _, _ = RunDir(run).load_checkpoint()
    except ActorQError as e:
        raise GraphError(f"{where}: {first_line(e)}") from None
    learner = state.get("learner")
    graphs = learner.get("graphs") if isinstance(learner, dict) else None
    if not isinstance(graphs, list) or graph not in graphs:
        return None
    best = tensors.get(f"best.{graphs.index(graph)}")
    if best is None:
        return None
    a = best.numpy()
    if a.ndim != 2 or a.shape[0] != num_ops or a.shape[1] < 1 or a.dtype.kind not in "iu":
        raise GraphError(
            f"{where}: its kept decision for {graph} is not {num_ops} ops' device indices"
        )
    placement = a[:, 0].astype(np.int64)
    if placement.size and (placement.min() < 0 or placement.max() >= nd):
        raise GraphError(
            f"{where}: its kept decision for {graph} names devices outside 0..{nd - 1}"
        )
    return placement


def load_policy(
    source: str | None, num_devices: int, run_config: ExperimentConfig | None = None
) -> tuple[GOPolicy, PolicyInfo]:
    """``source`` a run directory (its config ``run_config``, required then) or a policy
    file; None: the shipped policy for ``num_devices`` devices. The policy must place on
    exactly ``num_devices`` devices."""
    if source is None:
        path = shipped_path(num_devices)
        if not path.is_file():
            have = ", ".join(str(n) for n in shipped_device_counts()) or "none"
            raise GraphError(
                f"no placement policy ships for {num_devices} devices (shipped: {have}); train "
                "one with `actorq graphopt train` and pass --policy RUN"
            )
        model, info = load_policy_file(path)
    else:
        p = Path(source)
        if is_dir(p, f"--policy {shown(p)}", GraphError):
            if run_config is None:
                raise TypeError("load_policy: a run directory needs its run_config")
            model, info = load_policy_run(p, run_config)
        else:
            model, info = load_policy_file(p)
    if model.config.num_devices != num_devices:
        raise GraphError(
            f"the policy ({info.source}) places on {model.config.num_devices} devices, the "
            f"cluster has {num_devices}"
        )
    return model, info


def finite_or_none(x: float) -> float | None:
    """JSON has no Inf/NaN: a non-finite time is written as null."""
    return x if math.isfinite(x) else None
