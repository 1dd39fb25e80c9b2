"""What a run will hold in memory, estimated from its config before anything is allocated
(:func:`check_run_memory`): the replay's ring, the learner's networks with their gradients,
optimizer moments and target copies, one update's activations, and the actor processes. A run
that cannot fit is refused with one line (:class:`~actorq.resources.ResourceError`) instead of
swapping for minutes or dying in the allocator; the figures are estimates, not limits the run
then keeps to. A CUDA learner's networks, activations and replay copy (``replay_on_device``)
are checked against its device's free memory as well (:func:`device_memory`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from actorq.agents.builder import Builder
from actorq.agents.pixels import is_pixels
from actorq.config import ExperimentConfig
from actorq.errors import first_line
from actorq.replay.specs import QueueSpec
from actorq.resources import ResourceError, check_memory
from actorq.types import EnvSpec

#: One actor process beside its policy and environments: Python, numpy, gymnasium and
#: onnxruntime (83 MB resident measured for a CartPole DQN actor on this project's 2-core box).
ACTOR_PROCESS_BYTES = 90 << 20
#: Copies of the learner's weights: the weights, their gradients, Adam's two moments, and a
#: target network (DQN, D4PG) or a spare for PPO's old policy.
LEARNER_COPIES = 5
#: Copies of an on-policy update's trajectory chunks: the actors' adders, the queue, and the
#: learner's batch (its tensors, advantages and returns beside).
ROLLOUT_COPIES = 3
#: Copies of one batch item's activations an update holds at once: the online network's
#: forward kept for the backward pass, their gradients, and the forwards on the next
#: observation (the target network's; double DQN's online one too).
ACTIVATION_COPIES = 4
#: Tensors of one item's atoms a distributional update holds beside its activations: the
#: target's probabilities, the projection's targets, indices, weights and projected mass, the
#: critic's log-probabilities.
ATOM_COPIES = 10


def mlp_params(cfg: ExperimentConfig, spec: EnvSpec) -> int:
    """Parameters of the config's MLPs (one per width field: policy, critic or value), each
    reading the observation and the action and writing at most ``max(actions, 51)`` outputs
    (a distributional critic's atoms): an upper estimate."""
    inputs = spec.obs_dim + int(np.prod(spec.action.shape))
    outputs = max(spec.num_actions, int(np.prod(spec.action.shape)), 51)
    total = 0
    for name in cfg.width_fields:
        sizes = [inputs, *getattr(cfg, name), outputs]
        total += sum((a + 1) * b for a, b in itertools.pairwise(sizes))
    return total


def batch_memory(cfg: ExperimentConfig, spec: EnvSpec) -> tuple[str, int] | None:
    """(label, bytes) of the activations one learner update holds: every item of the batch
    (``batch_size``; PPO's ``minibatch_size``) through every width field's network, float32;
    None for a learner without MLP widths (GO's: its graphs are sized by ``--batch-graphs``,
    in its rollouts)."""
    name = next((f for f in ("batch_size", "minibatch_size") if hasattr(cfg, f)), None)
    if name is None or not cfg.width_fields:
        return None
    size: int = getattr(cfg, name)
    # pixels: the observation as float32, and the convolutions' maps (the Nature CNN's hold
    # about three quarters of its input again)
    obs = spec.obs_dim * (2 if is_pixels(spec) else 1)
    widths = sum(sum(getattr(cfg, f)) for f in cfg.width_fields)
    outputs = max(spec.num_actions, int(np.prod(spec.action.shape)), 1)
    atoms = int(getattr(cfg, "num_atoms", 0))  # a distributional critic's (D4PG)
    per_item = ACTIVATION_COPIES * (obs + widths + outputs + atoms) + ATOM_COPIES * atoms
    flags = ", ".join("--" + f.replace("_", "-") for f in (name, *cfg.width_fields))
    return f"an update's activations on batches of {size:,} ({flags})", size * per_item * 4


def _learner_parts(
    cfg: ExperimentConfig, spec: EnvSpec, params: int, activations: bool
) -> dict[str, int]:
    """The learner's networks (``params`` of them, with gradients and optimizer moments) and,
    where ``activations``, an update's activations (:func:`batch_memory`), by part."""
    parts: dict[str, int] = {}
    if params:
        flags = " or ".join("--" + f.replace("_", "-") for f in cfg.width_fields)
        parts[f"networks of {params:,} parameters ({flags})"] = params * 4 * LEARNER_COPIES
    batch = batch_memory(cfg, spec) if activations else None
    if batch is not None:
        parts[batch[0]] = batch[1]
    return parts


def run_memory(cfg: ExperimentConfig, builder: Builder, spec: EnvSpec) -> dict[str, int]:
    """Bytes a run will hold, by part (the parts that grow with the config); each label ends
    with the flags that size it, in parentheses."""
    parts: dict[str, int] = {}
    table = builder.table_config(cfg, spec)
    capacity = table.ring_capacity()
    item = sum(
        math.prod(s.shape) * np.dtype(s.dtype).itemsize
        for s in builder.data_specs(cfg, spec).values()
    )
    if capacity:
        parts[f"a replay of {capacity:,} items (--replay-size)"] = capacity * item
    if isinstance(table, QueueSpec):  # an update's chunks: on the actors, queued, as tensors
        label = f"rollouts of {table.batch_items:,} items ({cfg.rollout_flags})"
        parts[label] = ROLLOUT_COPIES * table.batch_items * item
    params = mlp_params(cfg, spec)
    on_host = not cfg.device.startswith("cuda")  # a CUDA learner's activations: on its device
    parts.update(_learner_parts(cfg, spec, params, activations=on_host))
    if cfg.actors:
        obs = spec.obs_dim * 4 * cfg.envs_per_actor * 64  # observations in flight and buffered
        each = ACTOR_PROCESS_BYTES + params * 4 * 2 + obs  # the policy: runtime and snapshot
        parts[f"{cfg.actors:,} actor processes (--actors)"] = cfg.actors * each
    return parts


def device_memory(cfg: ExperimentConfig, builder: Builder, spec: EnvSpec) -> dict[str, int]:
    """Bytes a CUDA learner (``cfg.device``) holds on its device, by part: its networks with
    their gradients and optimizer moments, an update's activations, and the replay's copy
    when the local backend keeps one there (``replay_on_device``)."""
    from actorq.replay.device import replay_bytes, replay_device  # torch: the learner side

    parts = _learner_parts(cfg, spec, mlp_params(cfg, spec), activations=True)
    capacity = builder.table_config(cfg, spec).ring_capacity()
    specs = builder.data_specs(cfg, spec)
    if capacity and cfg.backend == "local" and replay_device(cfg, capacity, specs):
        label = f"the replay's copy of {capacity:,} items (--replay-size, --replay-on-device)"
        parts[label] = replay_bytes(capacity, specs)
    return parts


def check_run_memory(
    cfg: ExperimentConfig, builder: Builder, spec: EnvSpec, device: bool = True
) -> None:
    """Refuse a run whose estimate (:func:`run_memory`) exceeds the memory available here, or
    whose CUDA learner's (:func:`device_memory`) exceeds its device's free memory. ``device``
    False: the host's check only (a bench checking its spec: asking a GPU what is free makes a
    CUDA context, which would hold its memory, or the GPU itself where it is exclusive, for
    the whole bench while its cells run in their own processes)."""
    check_memory(run_memory(cfg, builder, spec), "this run")
    if device and cfg.device.startswith("cuda"):
        import torch

        try:
            free, _ = torch.cuda.mem_get_info(torch.device(cfg.device))
        except RuntimeError as e:  # a busy or exclusive GPU, a driver that fails
            raise ResourceError(f"--device {cfg.device}: cannot use it ({first_line(e)})") from None
        check_memory(
            device_memory(cfg, builder, spec), "this run's learner", (free, "free"), cfg.device
        )


def check_policy_memory(cfg: ExperimentConfig, spec: EnvSpec) -> None:
    """Refuse to build a run's learner to read its policy (``actorq eval``, ``export``,
    ``actorq.load``) where its networks cannot fit here: a config.json edited to widths
    ``actorq train`` would refuse."""
    params = mlp_params(cfg, spec)
    need = {
        f"networks of {params:,} parameters (config.json's widths)": params * 4 * LEARNER_COPIES
    }
    check_memory(need, "this run's policy")
