"""Builds the pieces of a GO experiment (Acme's builder seam): whole-graph decisions with their
per-op behaviour log-probabilities, a consume-once queue with a staleness bound, graph actors
running the exported (int8) policy, and the learner's ONNX snapshots."""

from __future__ import annotations

from typing import Any

import numpy as np

from actorq.agents.go.actor import (
    HEADS,
    SNAPSHOT_KIND,
    GraphTask,
    decode_snapshot,
    log_softmax,
)
from actorq.agents.go.config import GOConfig
from actorq.agents.go.inputs import OnnxGOPolicy
from actorq.agents.go.learning import GOLearner, policy_config, pretrained_weights
from actorq.agents.policy_io import Comparison
from actorq.core.interfaces import Learner
from actorq.core.loop import ActorSetup, actor_seed
from actorq.errors import ConfigError
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.snapshot import PolicySpec
from actorq.replay.specs import NoAdderSpec, QueueGateSpec, QueueSpec
from actorq.types import ArraySpec, EnvSpec


class GOBuilder:
    def __init__(self) -> None:
        self._tasks: dict[tuple[Any, ...], list[GraphTask]] = {}

    def tasks(self, cfg: GOConfig) -> list[GraphTask]:
        """The training graphs as :class:`GraphTask` (built once per process and setting:
        building one runs the reference baseline)."""
        # GraphTask's arguments after the graph, in its order; with the graphs, the cache key
        args = (cfg.task(), cfg.cluster, cfg.reference, cfg.inputs())
        key = (cfg.train_graphs(), *args)
        if key not in self._tasks:
            self._tasks[key] = [GraphTask(g, *args) for g in cfg.train_graphs()]
        return self._tasks[key]

    def env_spec(self, cfg: GOConfig) -> EnvSpec:
        tasks = self.tasks(cfg)
        if cfg.init_from is not None:  # refuse a misfit before the run directory is written
            from actorq.agents.go.networks import GOPolicy

            pretrained_weights(cfg, GOPolicy(policy_config(cfg, tasks[0].env.cluster.num_devices)))
        max_ops = max(t.num_ops for t in tasks)
        return EnvSpec(
            cfg.env,
            ArraySpec((tasks[0].inputs.x.shape[1],), "float32"),  # per op; the graph is the state
            ArraySpec((max_ops, len(HEADS)), "int16"),  # levels to 256, devices to 1,024
            num_actions=tasks[0].env.cluster.num_devices,
        )

    def check_spec(self, spec: EnvSpec) -> None:
        return None

    def check_new_run(self, cfg: GOConfig, spec: EnvSpec) -> None:
        return None  # GO's graph network is exported whole: every precision applies

    def policy_spec(self, cfg: GOConfig, spec: EnvSpec) -> PolicySpec:
        raise ConfigError("GO's policy is a graph network, not an MLP (no --precision auto)")

    def data_specs(self, cfg: GOConfig, spec: EnvSpec) -> dict[str, ArraySpec]:
        max_ops = spec.action.shape[0]
        per_op = (max_ops, len(HEADS))
        return {
            "graph": ArraySpec((), "int32"),
            "actions": ArraySpec(per_op, "int16"),
            "log_prob": ArraySpec(per_op, "float32"),
            "reward": ArraySpec((), "float32"),
            "explore": ArraySpec((), "int8"),  # 1: a run-move decision, not a policy sample
            "feasible": ArraySpec((), "int8"),  # 0: the decision does not fit (penalised)
            "version": ArraySpec((), "int64"),
            "actor": ArraySpec((), "int32"),
        }

    def table_config(self, cfg: GOConfig, spec: EnvSpec) -> QueueSpec:
        return QueueSpec(cfg.batch_graphs, cfg.max_policy_lag)

    def actor_setup(self, cfg: GOConfig, spec: EnvSpec) -> ActorSetup:
        n_actors = max(cfg.actors, 1)
        return ActorSetup(
            env_spec=spec,
            envs_per_actor=cfg.envs_per_actor,
            behaviour="sample",
            noise=[[] for _ in range(n_actors)],
            adder=NoAdderSpec(),
            # each actor's share of one update's decisions, per policy version
            gate=QueueGateSpec(cfg.chunk_items(), cfg.max_policy_lag),
            seed=cfg.seed,
            runtime="ort",
            threads=cfg.actor_threads,
            kind="graph",
            workload={
                "graphs": list(cfg.train_graphs()),
                "task": cfg.task(),
                "cluster": cfg.cluster,
                "reference": cfg.reference,
                **cfg.inputs().to_json(),
                "max_ops": int(spec.action.shape[0]),
                "explore": cfg.exploration.explore,
            },
        )

    def make_learner(self, cfg: GOConfig, spec: EnvSpec) -> GOLearner:
        return GOLearner(cfg, self.tasks(cfg))

    def policy_io(self, cfg: GOConfig, spec: EnvSpec, learner: Learner) -> GOPolicyIO:
        assert isinstance(learner, GOLearner)
        return GOPolicyIO(cfg, learner)


class GOPolicyIO:
    """Snapshots are the exported network (:func:`actorq.agents.go.networks.onnx_bytes`) in a
    :class:`ModelSnapshot`; an evaluation is one greedy (argmax) decision per training graph,
    its "return" the improvement over the reference decision."""

    def __init__(self, cfg: GOConfig, learner: GOLearner) -> None:
        self.cfg, self.learner = cfg, learner
        n = len(learner.tasks)
        # the "return" is (S_ref - S) / S_ref: 0.1 is a step time 10% below the reference's
        self.eval_label = f"greedy, step-time gain over {cfg.reference}, mean of {n} graph(s)"

    def is_finite(self) -> bool:
        return self.learner.is_finite()

    def snapshot(
        self, version: int, precision: str, calibration: np.ndarray | None = None
    ) -> bytes:
        from actorq.agents.go.networks import onnx_bytes

        model = self.learner.model
        was = model.training
        model.eval()
        try:
            data = onnx_bytes(model, precision)
        finally:
            model.train(was)
        meta = {"num_devices": model.config.num_devices, "task": self.cfg.task()}
        return ModelSnapshot(version, precision, SNAPSHOT_KIND, data, meta).to_bytes()

    def _outputs(
        self, data: bytes, tasks: list[GraphTask] | None = None
    ) -> list[dict[str, np.ndarray]]:
        rt = OnnxGOPolicy(decode_snapshot(data).model, self.cfg.actor_threads)
        return [rt(t.inputs) for t in (self.learner.tasks if tasks is None else tasks)]

    def evaluate(self, data: bytes, episodes: int, seed: int) -> np.ndarray:
        """Improvement over the reference of the greedy decision, per training graph
        (deterministic: ``episodes`` and ``seed`` do not apply)."""
        out = []
        for task, o in zip(self.learner.tasks, self._outputs(data), strict=True):
            actions, _ = task.decide(o, None)
            out.append(task.judge(actions)[1])
        return np.asarray(out)

    def compare(
        self, quant: bytes, fp32: bytes, states: np.ndarray | None, seed: int
    ) -> Comparison:
        """Share of decided ops whose greedy choice is the same at both precisions, and the
        mean per-op |log π_quant(a) − log π_fp32(a)| for a sampled from the quantized policy."""
        rng = np.random.default_rng(actor_seed(seed, 0))
        same = total = 0.0
        gaps: list[np.ndarray] = []
        for task, oq, of in zip(
            self.learner.tasks, self._outputs(quant), self._outputs(fp32), strict=True
        ):
            m = task.mask > 0
            gq, _ = task.decide(oq, None)
            gf, _ = task.decide(of, None)
            same += float((gq == gf)[m].sum())
            total += float(m.sum())
            a, lq = task.decide(oq, rng)
            lf = np.zeros_like(lq)
            for c, h in enumerate(HEADS):
                lp = log_softmax(of[h])
                lf[:, c] = np.take_along_axis(lp, a[:, c : c + 1], axis=1)[:, 0]
            gaps.append(np.abs(lq - lf)[m])
        gap = float(np.concatenate(gaps).mean()) if gaps else None
        agree = same / total if total else float("nan")
        return Comparison(agree, int(total), "decided ops", None, gap)

    def summary_rows(self, data: bytes) -> list[tuple[str, str]]:
        """The greedy decision's simulated step time on each training graph beside the
        reference's (the first eight graphs; the evaluation row has the mean gain)."""
        rows = []
        tasks, shown = self.learner.tasks, self.learner.tasks[:8]
        for task, o in zip(shown, self._outputs(data, shown), strict=True):
            actions, _ = task.decide(o, None)
            _, gain, info = task.judge(actions)
            ref = 1e3 * float(info["reference_time"])
            if info.get("feasible", True):
                got = f"{1e3 * float(info['score']):.3f} ms"
            else:
                got = f"infeasible ({info.get('reason', 'no reason given')})"
            rows.append(
                (
                    f"step time on {task.name}",
                    f"{got} vs {self.cfg.reference} {ref:.3f} ms ({100 * gain:+.1f}%)",
                )
            )
        if len(tasks) > 8:
            rows.append(("step time", f"{len(tasks) - 8} more graphs in the mean gain above"))
        return rows


BUILDER = GOBuilder()
