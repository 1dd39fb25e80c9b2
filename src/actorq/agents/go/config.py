"""GO experiment configuration: one dataclass, every field documented (it is the CLI's --help),
its settings in groups (``--help``'s sections; flags and ``config.json`` keys keep their plain
names, :mod:`actorq.settings`): the policy network, PPO, the imitation warm start, exploration
and distillation. Knobs whose experiments concluded "no better" are retired
(:attr:`GOConfig.retired`); commit 67fd709 still runs them.

Defaults: GO's network at the sizes of :class:`actorq.agents.go.networks.GOPolicyConfig` (64 wide,
3 GraphSAGE and 2 segment-attention layers, segments of 64 ops), PPO's clipped surrogate
(Schulman et al. 2017) per op with ratio clip 0.2, 4 full-batch epochs per update, Adam 5e-4,
entropy bonus 0.01 per decided op, gradient clip 1.0; 32 whole-graph decisions per update.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from actorq.config import (
    ARCHIVE_COMMIT,
    NON_NEGATIVE,
    POSITIVE,
    Bound,
    ExperimentConfig,
    Group,
)
from actorq.errors import ConfigError, GraphError, first_line
from actorq.quant.onnx import ONNX_PRECISIONS

if TYPE_CHECKING:
    from actorq.agents.go.inputs import InputSpec


@dataclasses.dataclass
class GOPolicySettings:
    """The policy network (GOPolicy: GraphSAGE, then attention over segments of ops) and what
    it reads of each graph."""

    bounds: ClassVar[dict[str, Bound]] = {
        "hidden": Bound(4, 4096),
        "sage_layers": Bound(0, 64),
        "attn_layers": Bound(0, 64),
        "segment": Bound(1, 1_000_000),
        "pos_freqs": Bound(0, 30),
        "priority_levels": Bound(2, 256),
    }

    hidden: int = 64
    """Width of the policy's node embeddings."""
    sage_layers: int = 3
    """GraphSAGE layers."""
    attn_layers: int = 2
    """Segment-attention layers."""
    segment: int = 64
    """Ops per attention segment."""
    pos_freqs: int = 0
    """Fourier features of each op's topological position and depth, in octaves (0: none):
    with them imitation and distillation fit a split of the graph exactly
    (`git show 67fd709:docs/graphopt-transfer.md`, "Fitting a decision exactly")."""
    priority_levels: int = 8
    """Scheduling and joint tasks: the priority head's number of levels (equal-count buckets
    of a baseline's order when imitating it; ties run in topological order). Eight cost the
    joint task 2.8% at the best classical start on 4 PCIe GPUs, 64 about 1%
    (`git show 67fd709:docs/graphopt-transfer.md`, "what the priority levels cost")."""
    memory_input: bool = False
    """The policy also reads how each graph's memory compares with a device's capacity (the
    whole graph's need and its running total along the forward order, in device capacities;
    one simulator call per graph), so it can learn to spread a graph that does not fit on one
    device (`git show 67fd709:docs/graphopt-transfer.md`, "The held-out families' larger
    graphs")."""


@dataclasses.dataclass
class GOPPOSettings:
    """PPO's update (Schulman et al. 2017), per op, with GO's per-graph reward baseline."""

    bounds: ClassVar[dict[str, Bound]] = {
        "learning_rate": POSITIVE,
        "update_epochs": Bound(1, 10_000),
        "clip_coef": NON_NEGATIVE,
        "ent_coef": NON_NEGATIVE,
        "max_grad_norm": POSITIVE,
        "baseline_decay": Bound(0, 1, hi_open=True),
    }

    learning_rate: float = 5e-4
    """Adam learning rate."""
    update_epochs: int = 4
    """Full-batch PPO epochs per update."""
    clip_coef: float = 0.2
    """PPO ratio clip, per op."""
    ent_coef: float = 0.01
    """Entropy bonus per decided op."""
    max_grad_norm: float = 1.0
    """Gradient norm clip."""
    baseline_decay: float = 0.9
    """Per-graph reward baseline: exponential moving average with this decay (GO's per-graph
    normalisation; advantages are reward minus baseline, then normalised over the batch)."""


@dataclasses.dataclass
class ImitationSettings:
    """The imitation warm start: fit the policy to a classical baseline's decisions first."""

    bounds: ClassVar[dict[str, Bound]] = {
        "imitate_steps": Bound(0, 1_000_000),
        "imitate_lr": POSITIVE,
        "imitate_margin": Bound(0, 10),
    }

    imitate: str = "none"
    """Imitation warm start: before the first snapshot of a fresh run (not on --resume), fit
    the placement head to this baseline's placement of every training graph: single, expert,
    expert+cp, metis+cp, heft, heft-cut, m-etf, or best (the fastest feasible of heft, heft-cut,
    m-etf, metis+cp, expert and single per graph, judged as the task judges the policy); none
    to start from the initialisation (or --init-from's weights; with --init-from, imitation
    runs only if set here). Placement and joint tasks; in the joint task the priority and
    fusion heads imitate the baseline's priorities (as levels) and, where it is faster, greedy
    fusion too."""
    imitate_steps: int = 400
    """Full-batch Adam steps of the warm start (per-op cross-entropy, mean over graphs; the
    learning rate decays linearly to 0 over them)."""
    imitate_lr: float = 3e-3
    """Learning rate of the warm start's own Adam (PPO's optimizer starts fresh after it)."""
    imitate_relabel: bool = True
    """Rename each target's devices by first use in topological order (only when the cluster's
    devices and links are all alike, so the step time is unchanged): consistent labels across
    graphs."""
    imitate_margin: float = 0.0
    """With --imitate best: imitate the candidate on the fewest devices among those within
    1 + this of the fastest's step time (0: the fastest). Imitation reproduces a split only
    roughly, and a policy that learns to split graphs whose split gains a few percent splits
    unseen graphs where that loses (docs/go-transfer.md, "Simpler targets")."""


@dataclasses.dataclass
class ExplorationSettings:
    """Search beside the policy: annealing's run moves, and self-imitation of the best decision
    found."""

    bounds: ClassVar[dict[str, Bound]] = {
        "sil_coef": NON_NEGATIVE,
        "explore": Bound(0, 1, hi_open=True),
    }

    explore: float = 0.0
    """Fraction of actor decisions that are one of simulated annealing's run moves (a run of
    consecutive ops in topological order moved to one device) from the actor's incumbent on
    that graph (the best decision it has simulated, sampled or moved; the greedy decision
    before it has one) instead of a policy sample. They are kept out of PPO; they feed the
    run's best decision, which self-imitation (--sil-coef > 0) pulls the policy toward unless
    --no-explore-sil; they count in the decision budget. Placement and joint tasks."""
    explore_sil: bool = True
    """Whether self-imitation pulls toward the best decision found including --explore's run
    moves (the default) or toward the best policy sample only (--no-explore-sil: the run moves
    are then a search beside the policy; their finds are still the run's best decision)."""
    sil_coef: float = 0.0
    """Self-imitation (Oh et al. 2018): weight of the loss pulling the policy toward the best
    decision sampled so far on each graph (0: off)."""


@dataclasses.dataclass
class DistillationSettings:
    """Expert iteration: fit the policy to the best decisions found."""

    bounds: ClassVar[dict[str, Bound]] = {
        "distill_steps": Bound(0, 1_000_000),
        "distill_every": Bound(0, 10**12),
    }

    distill_steps: int = 0
    """Expert iteration (Anthony et al. 2017): full-batch Adam steps (at --imitate-lr, decaying
    to 0) fitting every head to each graph's best decision found so far (samples and
    --explore's run moves), at the end of training (so the final policy's greedy decision is
    what the run found) and every --distill-every decisions; 0: off."""
    distill_every: int = 0
    """Decisions between distillations during training (0: only at the end)."""


def retired_why(knob: str) -> str:
    """Why GO's ``knob`` was retired and where it still runs (one line's tail)."""
    return f"retired ({GOConfig.retired[knob][1]}); run it from commit {ARCHIVE_COMMIT}"


@dataclasses.dataclass
class GOConfig(ExperimentConfig):
    """Train GO's graph policy (placement, scheduling, fusion) with PPO and quantized actors."""

    agent: ClassVar[str] = "go"
    named_places: ClassVar[tuple[str, ...]] = ("ray_address", "init_from")
    rollout_flags: ClassVar[str] = "--batch-graphs"
    retired: ClassVar[dict[str, tuple[Any, str]]] = {
        "explore_guided": (False, "worse on 3 of 3 graphs in docs/go-transfer.md"),
        "explore_cut": (0.0, "no gain in docs/go-transfer.md"),
        "cost_input": (False, "no better in docs/go-transfer.md"),
        "imitate_guide": (0.0, "mixed, not adopted, in docs/go-transfer.md"),
        "start": ("none", "its learned edits do not transfer, docs/go-transfer.md"),
    }
    """Knobs retired after their experiments (docs/go-transfer.md, "What was tried")."""
    bounds: ClassVar[dict[str, Bound]] = {
        "batch_graphs": Bound(1, 100_000),
        "max_policy_lag": Bound(1, 1000),
    }

    env: str = "graphopt:placement/rnnlm-s"
    """graphopt:<task>/<graph>: the task (placement, scheduling, fusion or joint) and the first
    training graph (a suite name, synthetic-<ops>-s<seed>, or a .json/.npz graph file)."""
    graphs: tuple[str, ...] = ()
    """More training graphs (the policy is one for all of them: GO's transfer)."""
    cluster: str = "4xgpu-pcie"
    """The devices and links the simulator runs the graphs on (a preset such as 8xgpu-nvlink,
    or a cluster JSON file)."""
    reference: str = "expert"
    """The decision rewards are relative to (the human-expert split by default); the task's
    other decisions come from it."""
    precision: str = "fp32"
    """Precision of the policy actors run: fp32, or int8 (GraphSAGE, attention and head hidden
    layers in int8); the learner always trains in fp32. fp32 by default, unlike actorq's MLP
    agents: GO's network is 64 wide, so most of an inference is memory-bound elementwise work
    that int8's activation quantization adds to; alone on a core int8 is no faster, and with
    15 actor processes on 16 cores fp32 actors trained an 80k-op graph 1.6x faster
    (docs/graphopt.md, "The learner on a GPU")."""
    actors: int = 1
    """Actor processes (0: one in the learner's process, deterministic for a seed)."""
    envs_per_actor: int = 8
    """Whole-graph decisions an actor samples per step."""
    total_steps: int = 20_000
    """Budget of whole-graph decisions (simulator calls), all actors together."""
    batch_graphs: int = 32
    """Decisions per learner update; a multiple of max(actors, 1) x envs_per_actor (each actor
    contributes the same number of whole steps)."""
    max_policy_lag: int = 1
    """Staleness bound in policy versions (1 = synchronous PPO; see PPOConfig)."""
    init_from: str | None = None
    """Start from the policy of this GO run directory's checkpoint (weights only: the
    optimizer, baselines and counters start fresh), e.g. one pre-trained on other graphs: GO's
    fine-tuning. Its network sizes and device count must match this run's."""
    policy: Annotated[GOPolicySettings, Group] = dataclasses.field(default_factory=GOPolicySettings)
    ppo: Annotated[GOPPOSettings, Group] = dataclasses.field(default_factory=GOPPOSettings)
    imitation: Annotated[ImitationSettings, Group] = dataclasses.field(
        default_factory=ImitationSettings
    )
    exploration: Annotated[ExplorationSettings, Group] = dataclasses.field(
        default_factory=ExplorationSettings
    )
    distillation: Annotated[DistillationSettings, Group] = dataclasses.field(
        default_factory=DistillationSettings
    )
    publish_every: int = 1
    eval_every: int = 2_000
    """Decisions between greedy evaluations (one argmax decision per training graph)."""
    checkpoint_every: int = 50
    """Learner updates between checkpoints (one is also written at the end and on Ctrl-C)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.graphs, list | tuple):  # JSON gives lists; keep comparisons exact
            self.graphs = tuple(self.graphs)

    def train_graphs(self) -> tuple[str, ...]:
        """The env's graph, then ``graphs``, without repeats."""
        first = self.env.partition(":")[2].partition("/")[2]
        return tuple(dict.fromkeys((first, *self.graphs)))

    def chunk_items(self) -> int:
        """Decisions each actor contributes to one update."""
        return self.batch_graphs // max(self.actors, 1)

    def task(self) -> str:
        return self.env.partition(":")[2].partition("/")[0]

    def inputs(self) -> InputSpec:
        """What the policy reads from each graph (actors, learner and policy files agree)."""
        from actorq.agents.go.inputs import InputSpec  # the graph world loads on use

        return InputSpec(
            memory=self.policy.memory_input, priority_levels=self.policy.priority_levels
        )

    def uses_gptq(self) -> bool:
        return False  # the exported network quantizes per op row at run time (graphopt.policy)

    def validate(self) -> None:
        super().validate()
        if not self.env.startswith("graphopt:"):
            raise ConfigError(f"GO trains on graphopt:<task>/<graph> ids, got --env {self.env!r}")
        if self.precision not in ONNX_PRECISIONS:
            raise ConfigError(f"GO's actors run int8 or fp32 policies, not {self.precision!r}")
        if self.publish_every != 1:
            raise ConfigError("GO publishes after every update (--publish-every 1)")
        if self.runtime != "ort":
            raise ConfigError("GO's graph policy runs in onnxruntime only (--runtime ort)")
        per_step = max(self.actors, 1) * self.envs_per_actor
        if self.batch_graphs % per_step:
            raise ConfigError(
                f"--batch-graphs {self.batch_graphs} must be a multiple of max(actors, 1) x "
                f"envs_per_actor = {per_step} (every actor contributes whole steps to an update)"
            )
        if self.policy.hidden % 4:
            raise ConfigError(
                f"--hidden must divide by 4 (attention heads), got {self.policy.hidden}"
            )
        from actorq.graphopt.cluster import get_cluster
        from actorq.graphopt.envs import validate_graphopt_id
        from actorq.graphopt.suite import OTHER_NAMES, is_graph_name

        validate_graphopt_id(self.env.partition(":")[2])
        for g in self.graphs:
            if not isinstance(g, str) or not is_graph_name(g):
                raise ConfigError(
                    f"--graphs: unknown graph {g!r} (see `actorq graphopt list`; also "
                    f"{OTHER_NAMES})"
                )
        try:
            get_cluster(self.cluster)
        except GraphError as e:
            raise ConfigError(f"--cluster: {first_line(e)}") from None
        from actorq.agents.go.targets import CHOICES, TASKS
        from actorq.graphopt.baselines import REFERENCES

        if self.imitation.imitate not in CHOICES:
            raise ConfigError(
                f"--imitate must be one of {', '.join(CHOICES)}, not {self.imitation.imitate!r}"
            )
        if self.imitation.imitate != "none" and self.task() not in TASKS:
            raise ConfigError(
                f"--imitate {self.imitation.imitate} imitates decisions with a placement: "
                f"{' or '.join(TASKS)} task, not {self.task()!r}"
            )
        if self.imitation.imitate_margin > 0 and self.imitation.imitate != "best":
            raise ConfigError(
                f"--imitate-margin {self.imitation.imitate_margin:g} picks among --imitate best's "
                f"candidates: --imitate best, not {self.imitation.imitate!r}"
            )

        if self.exploration.explore > 0 and self.task() not in ("placement", "joint"):
            raise ConfigError(
                f"--explore moves runs of ops between devices: placement or joint task, not "
                f"{self.task()!r}"
            )
        if (
            self.exploration.explore > 0
            and self.exploration.explore_sil
            and self.exploration.sil_coef == 0
        ):
            raise ConfigError(
                "--explore's decisions teach the policy only through self-imitation: set "
                "--sil-coef > 0 (or --no-explore-sil for a search beside the policy)"
            )
        if self.distillation.distill_every > 0 and self.distillation.distill_steps == 0:
            raise ConfigError("--distill-every needs --distill-steps > 0")
        if self.reference not in REFERENCES:
            raise ConfigError(
                f"--reference must be a deterministic baseline, not {self.reference!r}"
            )
