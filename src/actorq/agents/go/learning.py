"""GO's update rule: PPO over whole-graph one-shot decisions, per-op clipped ratios.

GO (Zhou et al., NeurIPS 2020) trains its graph policy with PPO (Schulman et al. 2017) on
one-shot decisions: one sample is a whole graph's placement (and/or schedule and fusion), its
reward the normalised simulated step time. The joint probability of thousands of per-op choices
makes a single joint importance ratio useless (a tiny per-op change multiplies into an enormous
ratio), so, as in GDP (Zhou et al. 2019) and Placeto, the surrogate is taken per op: every
decided op's ratio ``π(a_i | G) / μ(a_i | G)`` against the log-prob the actor recorded under the
snapshot it ran (the int8 behaviour policy ``μ``), clipped, times the decision's advantage,
averaged over the decided ops. The advantage is the reward minus a per-graph baseline (an
exponential moving average of that graph's rewards), normalised over the batch: there is no
state to learn a value of, and rewards of different graphs live on their own scales.

Self-imitation (``sil_coef > 0``; Oh et al., ICML 2018): the learner keeps the best decision
sampled so far for every graph and adds ``sil_coef`` times its weighted negative log-likelihood
(mean over the decided ops) to the loss, weighted by how far its reward lies above the graph's
baseline, ``(R_best - b) / σ`` clipped to [0, 3] (σ the batch's reward spread, the scale PPO's
advantages are normalised by): a good placement found once keeps pulling the policy until the
policy's own samples reach it, instead of being one positive advantage among thousands of
per-op choices. The best decision per graph is tracked (and checkpointed) either way: it is the
search result a run found, which the benchmarks compare with annealing at equal simulator calls.

One update = ``update_epochs`` full-batch epochs; each runs the network once per distinct graph
in the batch (a graph's outputs serve every decision sampled for it).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorq.agents.go.actor import HEADS, GraphTask
from actorq.agents.go.config import GOConfig, retired_why
from actorq.agents.go.networks import GOPolicy, GOPolicyConfig
from actorq.agents.optim import adam
from actorq.agents.state import pack, unpack
from actorq.core.interfaces import Learner
from actorq.types import Batch

#: Share of ops the imitation should fit (greedy == target) before PPO starts; below it the
#: warm start warns.
IMITATION_FIT = 0.99


def policy_config(cfg: GOConfig, num_devices: int) -> GOPolicyConfig:
    return GOPolicyConfig(
        num_devices=num_devices,
        hidden=cfg.policy.hidden,
        sage_layers=cfg.policy.sage_layers,
        attn_layers=cfg.policy.attn_layers,
        segment=cfg.policy.segment,
        pos_freqs=cfg.policy.pos_freqs,
        **cfg.inputs().policy_switches(),
    )


def run_policy_tensors(run: Path, flag: str) -> dict[str, torch.Tensor]:
    """The policy tensors (names as in :class:`GOPolicy`) of GO run ``run``'s checkpoint, not
    yet checked against a model (:class:`~actorq.errors.CheckpointError` if it is not a GO
    run); ``flag`` names the option in errors."""
    from actorq.errors import CheckpointError
    from actorq.rundir import RunDir

    rd = RunDir(run)
    if not rd.is_run():
        raise CheckpointError(f"{flag} {run}: not an actorq run directory (no config.json)")
    tensors, state, _, _ = rd.load_checkpoint()
    if not isinstance(state.get("learner"), dict) or "graphs" not in state["learner"]:
        raise CheckpointError(f"{flag} {run}: not a GO run")
    return {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}


def pretrained_weights(cfg: GOConfig, model: GOPolicy) -> dict[str, torch.Tensor]:
    """The policy weights of the GO run ``cfg.init_from``, checked against ``model``'s shapes
    (:class:`~actorq.errors.CheckpointError`, one line, otherwise).

    One difference is bridged: a policy without position octaves (``pos_freqs`` 0) starts a
    network with them, the octaves' input weights at zero, so the fine-tuning run starts from
    the pre-trained policy's outputs exactly (octaves fit a graph's split but transfer badly:
    `git show 67fd709:docs/graphopt-transfer.md`, "Fitting a decision exactly")."""
    from actorq.errors import CheckpointError

    run = Path(str(cfg.init_from))
    weights = run_policy_tensors(run, "--init-from")
    want = model.state_dict()
    if "start_gain" in weights:  # same shapes can mean other inputs
        raise CheckpointError(
            f"--init-from {run}: its policy decides from a start placement (--start, "
            f"{retired_why('start')})"
        )
    got_inp, want_inp = weights.get("inp.weight"), want["inp.weight"]
    extra = 4 * model.config.pos_freqs
    if (
        extra
        and got_inp is not None
        and tuple(got_inp.shape) == (want_inp.shape[0], want_inp.shape[1] - extra)
    ):
        weights = {**weights, "inp.weight": torch.nn.functional.pad(got_inp, (0, extra))}
    for k, v in want.items():
        got = weights.get(k)
        if got is None or tuple(got.shape) != tuple(v.shape):
            raise CheckpointError(
                f"--init-from {run}: its policy does not fit this one ({k}: "
                f"{None if got is None else tuple(got.shape)} vs {tuple(v.shape)}; same "
                "--hidden, layers, segment, --pos-freqs, --memory-input, "
                "--priority-levels and device count needed)"
            )
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise CheckpointError(  # before the run directory is written (the builder's call)
                f"--init-from {run}: its policy weight {k} is NaN or infinite (a diverged run)"
            )
    return {k: weights[k] for k in want}


def chosen_log_probs(lps: list[torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
    """``(n, len(HEADS))``: each op's log-probability of its chosen action under each head's
    log-softmax ``lps[c]`` (n, choices), for ``actions`` (n, len(HEADS))."""
    return torch.stack([lp.gather(1, actions[:, c : c + 1])[:, 0] for c, lp in enumerate(lps)], 1)


def batched_log_probs(lps: list[torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
    """:func:`chosen_log_probs` for ``k`` decisions at once: ``(k, n, len(HEADS))`` for
    ``actions`` ``(k, n, len(HEADS))``."""
    n = actions.shape[1]
    rows = torch.arange(n, device=actions.device)
    return torch.stack([lp[rows, actions[:, :, c]] for c, lp in enumerate(lps)], 2)


#: Updates between two reports of infeasible decisions on the same graph.
INFEASIBLE_EVERY = 100


class GOLearner(Learner):
    def __init__(self, cfg: GOConfig, tasks: list[GraphTask]) -> None:
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        torch.manual_seed(cfg.seed)
        self.tasks = tasks
        self.model = GOPolicy(policy_config(cfg, tasks[0].env.cluster.num_devices)).to(self.device)
        self.opt = adam(self.model.parameters(), cfg.ppo.learning_rate)
        self._inputs = [
            {k: v.to(self.device) for k, v in t.inputs.tensors().items()} for t in tasks
        ]
        self._masks = [torch.from_numpy(t.mask).to(self.device) for t in tasks]
        self.baseline = np.full(len(tasks), np.nan)
        self.updates = 0
        self.imitation: list[dict[str, Any]] = []  # the warm start's per-graph records
        # the best decision sampled so far per graph (self-imitation's targets, and the run's
        # search result): its reward and per-op actions (n, len(HEADS))
        self.best_reward = np.full(len(tasks), -np.inf)
        self.best_actions: list[torch.Tensor | None] = [None] * len(tasks)
        # how often the best decision improved through a policy sample / a run-move decision
        self.improved = {"policy": 0, "explore": 0}
        # --no-explore-sil: self-imitation's targets are the best policy samples only (the run
        # moves' finds stay in best_* , the run's search result)
        self.separate_sil = cfg.exploration.explore > 0 and not cfg.exploration.explore_sil
        self.sil_reward = np.full(len(tasks), -np.inf)
        self.sil_actions: list[torch.Tensor | None] = [None] * len(tasks)
        self.since_distill = 0  # decisions since the last distillation (--distill-every)
        # per graph: the update at which an infeasible decision's reason was last printed
        self.infeasible_told = np.full(len(tasks), -INFEASIBLE_EVERY)
        self.distills = 0
        if cfg.init_from is not None:
            self.model.load_state_dict(pretrained_weights(cfg, self.model))

    # -- the update --------------------------------------------------------------------------
    def advantages(self, graphs: np.ndarray, rewards: np.ndarray) -> np.ndarray:
        """Reward minus each graph's baseline (then updated with these rewards), normalised."""
        adv = np.empty(len(rewards))
        for j, (g, r) in enumerate(zip(graphs, rewards, strict=True)):
            b = self.baseline[g]
            adv[j] = 0.0 if math.isnan(b) else r - b
        for g in np.unique(graphs):
            mean = float(rewards[graphs == g].mean())
            b = self.baseline[g]
            d = self.cfg.ppo.baseline_decay
            self.baseline[g] = mean if math.isnan(b) else d * b + (1 - d) * mean
        if len(adv) > 1 and adv.std() > 1e-8:
            adv = (adv - adv.mean()) / adv.std()
        return adv

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg
        graphs = np.asarray(batch["graph"], np.int64)
        rewards = np.asarray(batch["reward"], np.float64)
        # run-move decisions (--explore) are not samples of the policy: no ratio, no baseline
        explore = np.asarray(batch.get("explore", np.zeros(len(rewards))), bool)
        sampled = np.flatnonzero(~explore)
        adv_np = np.zeros(len(rewards))
        if sampled.size:
            adv_np[sampled] = self.advantages(graphs[sampled], rewards[sampled])
        adv = torch.as_tensor(adv_np, dtype=torch.float32, device=self.device)
        actions = torch.from_numpy(np.asarray(batch["actions"], np.int64)).to(self.device)
        old_lp = torch.from_numpy(np.asarray(batch["log_prob"], np.float32)).to(self.device)
        by_graph = {int(g): np.flatnonzero(graphs == g) for g in np.unique(graphs)}
        # each graph's policy samples (run-move decisions carry no ratio), indexed on the device
        own_by_graph = {
            g: torch.from_numpy(idx[~explore[idx]]).to(self.device) for g, idx in by_graph.items()
        }
        scale = rewards[sampled] if sampled.size > 1 else rewards
        sil_w = self.track_best(by_graph, rewards, actions, explore, float(scale.std()))
        stats: dict[str, list[float]] = {"pg": [], "ent": [], "kl": [], "clip": [], "gn": []}
        stats["sil"] = []
        for _ in range(cfg.ppo.update_epochs):
            pg_total = torch.zeros((), device=self.device)
            ent_total = torch.zeros((), device=self.device)
            sil_total = torch.zeros((), device=self.device)
            # the diagnostics stay on the learner's device until the epoch ends: a float() per
            # decision would wait for a GPU learner's queue once per decision
            kl_sum = torch.zeros((), device=self.device)
            clip_sum = torch.zeros((), device=self.device)
            count = 0
            for g, own in own_by_graph.items():
                out = self.model(**self._inputs[g])
                mask = self._masks[g]  # (n, 3): the ops each head decides
                n = mask.shape[0]
                lps = [torch.log_softmax(out[h], dim=-1) for h in HEADS]
                ent = sum((-(lp.exp() * lp).sum(-1) * mask[:, c]).sum() for c, lp in enumerate(lps))
                decided = mask.sum().clamp(min=1.0)
                best = self.sil_target(g)[1]
                if sil_w.get(g, 0.0) > 0.0 and best is not None:
                    nll = -(chosen_log_probs(lps, best) * mask).sum()
                    sil_total = sil_total + sil_w[g] * nll / decided
                if not own.numel():
                    continue
                # the graph's policy samples at once: (k, n, heads) log-probs of their actions
                new = batched_log_probs(lps, actions[own, :n])
                log_ratio = (new - old_lp[own, :n]) * mask
                ratio = log_ratio.exp()
                a = adv[own][:, None, None]
                surr = torch.minimum(
                    ratio * a, ratio.clamp(1 - cfg.ppo.clip_coef, 1 + cfg.ppo.clip_coef) * a
                )
                pg_total = pg_total - (surr * mask).sum() / decided
                ent_total = ent_total + own.numel() * ent / decided
                with torch.no_grad():
                    kl_sum += (((ratio - 1) - log_ratio) * mask).sum() / decided
                    far = ((ratio - 1).abs() > cfg.ppo.clip_coef).float() * mask
                    clip_sum += far.sum() / decided
                count += own.numel()
            count = max(count, 1)  # a batch of run-move decisions only: self-imitation alone
            pg_loss, entropy = pg_total / count, ent_total / count
            sil_loss = sil_total / len(by_graph)
            loss = pg_loss - cfg.ppo.ent_coef * entropy + cfg.exploration.sil_coef * sil_loss
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.ppo.max_grad_norm)
            self.opt.step()
            stats["pg"].append(float(pg_loss.detach()))
            stats["ent"].append(float(entropy.detach()))
            stats["kl"].append(float(kl_sum) / count)
            stats["clip"].append(float(clip_sum) / count)
            stats["gn"].append(float(gn))
            stats["sil"].append(float(sil_loss.detach()))
        self.updates += 1
        feasible = np.asarray(batch.get("feasible", np.ones(len(rewards))), bool)
        if not feasible.all():
            self.tell_infeasible(graphs, feasible, batch["actions"])
        extra: dict[str, float] = {}
        self.since_distill += len(rewards)
        if cfg.distillation.distill_every and self.since_distill >= cfg.distillation.distill_every:
            extra = self.distill()
        return {
            **extra,
            "losses/policy_loss": stats["pg"][-1],
            "losses/entropy": stats["ent"][0],
            "losses/approx_kl": stats["kl"][-1],
            "losses/clipfrac": float(np.mean(stats["clip"])),
            "losses/grad_norm": float(np.mean(stats["gn"])),
            "charts/batch_reward": float(rewards.mean()),
            "charts/best_reward": float(np.mean(self.best_reward[list(by_graph)])),
            "losses/sil_loss": stats["sil"][-1],
            "charts/best_by_policy": float(self.improved["policy"]),
            "charts/best_by_explore": float(self.improved["explore"]),
            "charts/infeasible_share": float(1.0 - feasible.mean()),
        }

    def tell_infeasible(self, graphs: np.ndarray, feasible: np.ndarray, actions: Any) -> None:
        """Print why the batch's decisions on a graph did not fit (the simulator's reason for the
        first of them, simulated again here), at most once per graph every
        :data:`INFEASIBLE_EVERY` updates: the penalty alone says how bad, not which device and
        op ran out of memory, which is what a user changes (the cluster, the graph's batch)."""
        for g in np.unique(graphs[~feasible]).tolist():
            if self.updates - self.infeasible_told[g] < INFEASIBLE_EVERY:
                continue
            self.infeasible_told[g] = self.updates
            bad = np.flatnonzero((graphs == g) & ~feasible)
            task = self.tasks[g]
            _, _, info = task.judge(np.asarray(actions[bad[0]][: task.num_ops], np.int64))
            print(
                f"infeasible: {len(bad)} of {int((graphs == g).sum())} decisions on "
                f"{task.env.graph.name} in update {self.updates} do not fit (penalised), e.g. "
                f"{info['reason'] or 'no reason given'}",
                flush=True,
            )

    def track_best(
        self,
        by_graph: dict[int, np.ndarray],
        rewards: np.ndarray,
        actions: torch.Tensor,
        explore: np.ndarray,
        sigma: float,
    ) -> dict[int, float]:
        """Keep each graph's best decision so far (``by_graph``: the batch's decisions per
        graph, ``explore``: which are run-move decisions); return self-imitation's weight per
        graph of the batch, ``clip((R_best - b) / σ, 0, 3)`` (none when ``sil_coef`` is 0;
        ``sigma``: the spread of the batch's policy samples' rewards)."""
        for g, idx in by_graph.items():
            j = int(idx[np.argmax(rewards[idx])])
            if rewards[j] > self.best_reward[g]:
                if np.isfinite(self.best_reward[g]):  # a first decision is no improvement
                    self.improved["explore" if explore[j] else "policy"] += 1
                self.best_reward[g] = float(rewards[j])
                self.best_actions[g] = actions[j, : self.tasks[g].num_ops].clone()
            own = idx[~explore[idx]]
            if self.separate_sil and own.size:
                j = int(own[np.argmax(rewards[own])])
                if rewards[j] > self.sil_reward[g]:
                    self.sil_reward[g] = float(rewards[j])
                    self.sil_actions[g] = actions[j, : self.tasks[g].num_ops].clone()
        if self.cfg.exploration.sil_coef == 0.0:
            return {}
        sigma = max(sigma, 1e-8)
        out = {}
        for g in by_graph:
            b = self.baseline[g]
            gap = 0.0 if math.isnan(b) else (self.sil_target(g)[0] - b) / sigma
            out[g] = float(np.clip(gap, 0.0, 3.0))
        return out

    def sil_target(self, g: int) -> tuple[float, torch.Tensor | None]:
        """Self-imitation's target on graph ``g``: its reward and per-op actions."""
        if self.separate_sil:
            return float(self.sil_reward[g]), self.sil_actions[g]
        return float(self.best_reward[g]), self.best_actions[g]

    def distill(self) -> dict[str, float]:
        """``--distill-steps``: fit the policy to each graph's best decision so far
        (:func:`actorq.agents.go.imitation.distill`)."""
        from actorq.agents.go.imitation import distill

        self.since_distill = 0
        cfg = self.cfg
        out = distill(
            self.model, self.tasks, self._inputs,
            [None if a is None else a.cpu().numpy() for a in self.best_actions],
            cfg.distillation.distill_steps, cfg.imitation.imitate_lr,
        )  # fmt: skip
        self.distills += bool(out)
        return out

    def finish(self) -> dict[str, float]:
        """The final distillation (``--distill-steps``): the final policy's greedy decisions
        become what the run found."""
        if self.cfg.distillation.distill_steps == 0:
            return {}
        out = self.distill()
        if out:
            print(
                f"distill: {self.cfg.distillation.distill_steps} steps in "
                f"{out['distill/seconds']:.1f} s, "
                f"greedy agrees with the best found on {100 * out['distill/accuracy']:.1f}% of "
                "decided ops",
                flush=True,
            )
        return out

    def best_times(self) -> list[float | None]:
        """Each graph's best sampled step time so far (seconds, penalised; None if none yet):
        rewards are ``-sqrt(S / S_ref)``."""
        return [
            None if not np.isfinite(r) else float(r * r * t.env.reference_time)
            for r, t in zip(self.best_reward, self.tasks, strict=True)
        ]

    # -- the seams ---------------------------------------------------------------------------
    def warm_start(self) -> dict[str, float]:
        """``--imitate``: fit the placement head to a baseline's placements before the first
        snapshot (:mod:`actorq.agents.go.imitation`); ``train()`` calls it for fresh runs only.
        The per-graph records (baseline chosen, its step time, the greedy one's, agreement) go
        into the checkpoint's learner state and one line per graph to stdout."""
        cfg = self.cfg
        if cfg.imitation.imitate == "none":
            return {}
        from actorq.agents.go.imitation import warm_start

        im = cfg.imitation
        metrics, self.imitation = warm_start(
            self.model, self.tasks, self._inputs, im.imitate, im.imitate_steps, im.imitate_lr,
            seed=cfg.seed, relabel=im.imitate_relabel, margin=im.imitate_margin,
        )  # fmt: skip
        # the reward baselines start at the imitated greedy decisions' rewards: PPO's first
        # update then has advantages (with none, it would be an entropy step only, which Adam
        # scales to a full step and which undoes the imitation)
        for i, r in enumerate(self.imitation):
            self.baseline[i] = -float(np.sqrt(r["greedy_time"] / self.tasks[i].env.reference_time))
        for r in self.imitation:
            print(
                f"imitate {r['baseline']} on {r['graph']}: target {1e3 * r['target_time']:.2f} ms"
                f"{' (relabelled)' if r['relabelled'] else ''}, greedy "
                f"{1e3 * r['greedy_time']:.2f} ms, {100 * r['agreement']:.1f}% of ops agree",
                flush=True,
            )
        print(
            f"imitate: {cfg.imitation.imitate_steps} steps in {metrics['imitate/seconds']:.1f} s, "
            "loss "
            f"{metrics['imitate/loss']:.4f}, accuracy {100 * metrics['imitate/accuracy']:.1f}%, "
            f"greedy/target step time {metrics['imitate/time_ratio']:.3f} (geomean), "
            f"{metrics['imitate/sim_calls']:.0f} simulator calls",
            flush=True,
        )
        if metrics["imitate/accuracy"] < IMITATION_FIT:
            # an unfit imitation leaves a flat policy whose samples are far worse than its
            # greedy decision: PPO then loses the imitated placement (docs/go-transfer.md)
            print(
                f"imitate: warning: only {100 * metrics['imitate/accuracy']:.1f}% of ops fit "
                f"(want >= {100 * IMITATION_FIT:.0f}%): sampled decisions will stray from the "
                "imitated placement and PPO may lose it; raise --imitate-steps (from "
                "--init-from weights the fit takes about 3x the steps)",
                flush=True,
            )
        return metrics

    def _load_kept(self, tensors: dict[str, Any], saved: list[Any], name: str) -> None:
        """Restore the kept decisions ``name`` (best: the best found; sil: self-imitation's
        own targets) and their rewards; a missing or misshapen one starts afresh."""
        rewards = self.best_reward if name == "best" else self.sil_reward
        kept = self.best_actions if name == "best" else self.sil_actions
        for i, r in enumerate(saved):
            a = tensors.get(f"{name}.{i}")
            if r is None or a is None or tuple(a.shape) != (self.tasks[i].num_ops, len(HEADS)):
                rewards[i], kept[i] = -np.inf, None
            else:
                rewards[i] = float(r)
                kept[i] = a.to(device=self.device, dtype=torch.int64)

    def is_finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for p in self.model.parameters())

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        tensors, meta = pack({"model": self.model}, {"opt": self.opt})
        meta.update(
            updates=self.updates,
            baseline=[None if math.isnan(b) else float(b) for b in self.baseline],
            graphs=[t.name for t in self.tasks],
            imitation=self.imitation,
            best_reward=[float(r) if np.isfinite(r) else None for r in self.best_reward],
            best_time=self.best_times(),
            improved=dict(self.improved),
            since_distill=self.since_distill,
            distills=self.distills,
        )
        for i, a in enumerate(self.best_actions):
            if a is not None:
                tensors[f"best.{i}"] = a.detach().cpu().contiguous()
        if self.separate_sil:
            meta["sil_reward"] = [float(r) if np.isfinite(r) else None for r in self.sil_reward]
            for i, a in enumerate(self.sil_actions):
                if a is not None:
                    tensors[f"sil.{i}"] = a.detach().cpu().contiguous()
        return tensors, meta

    def load_state(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        if list(meta["graphs"]) != [t.name for t in self.tasks]:
            raise ValueError(f"checkpoint trained on graphs {meta['graphs']}, not these")
        unpack(tensors, meta, {"model": self.model}, {"opt": self.opt}, self.device)
        # runs before the best decisions were tracked have none: tracking starts afresh
        self._load_kept(tensors, meta.get("best_reward") or [None] * len(self.tasks), "best")
        self._load_kept(tensors, meta.get("sil_reward") or [None] * len(self.tasks), "sil")
        self.updates = int(meta["updates"])
        got = meta.get("improved") or {}  # absent in runs before --explore
        self.improved = {k: int(got.get(k, 0)) for k in self.improved}
        self.since_distill = int(meta.get("since_distill", 0))
        self.distills = int(meta.get("distills", 0))
        self.imitation = list(meta.get("imitation", []))  # absent in runs before --imitate
        self.baseline = np.array(
            [np.nan if b is None else float(b) for b in meta["baseline"]], np.float64
        )
