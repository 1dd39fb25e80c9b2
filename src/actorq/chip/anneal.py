"""Classical macro-placement baselines: a random legal placement and simulated annealing.

Mirhoseini et al. 2021 (Nature, "A graph placement methodology for fast chip design") compare
their RL placer with simulated annealing over macro positions; TILOS MacroPlacement's reports
give SA as the strongest classical baseline on Ariane133 (best proxy 0.7552 with their
evaluator). This SA moves hard macros — and optionally soft macros — with four moves:

* **shift**: a macro moves by a random offset, up to a range that shrinks with the temperature;
* **move**: a macro jumps to a uniformly random position;
* **swap**: two hard macros exchange centres;
* **flip**: a hard macro takes another of N, FN, S, FS (or of E, FE, W, FW for a turned one):
  flips keep its footprint, and circuit_training allows no 90° turns
  (``docs/NETLIST_FORMAT.md``).

A hard-macro move is legal when the macro stays inside the canvas and overlaps no other hard
macro; illegal proposals are skipped. A legal proposal is applied with
:meth:`PlacementCost.move` (incremental, ~0.3 ms on Ariane133), accepted by the Metropolis rule
on the proxy cost and otherwise moved back. Temperatures fall geometrically from ``t0`` (by
default the mean cost change of a random proposal, so one schedule fits netlists whose moves
change the cost by 1e-4 or by 1e-1) to ``t0 · t1_ratio``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from actorq.chip.cost import PlacementCost
from actorq.errors import ConfigError

FLIPS = np.array([0, 1, 2, 3], np.int8)  # N, FN, S, FS


@dataclass(frozen=True)
class AnnealConfig:
    """Simulated annealing settings."""

    steps: int = 20_000
    """proposed moves in all (illegal ones count)"""
    t0: float | None = None
    """starting temperature, in proxy-cost units (an uphill step of t0 is accepted with
    probability 1/e); None: the mean |Δproxy| of 100 random legal proposals"""
    t1_ratio: float = 1e-3
    """final temperature over the starting one"""
    move_soft: bool = False
    """also shift/move soft macros (standard-cell clusters), without overlap checks"""
    p_shift: float = 0.5
    p_move: float = 0.2
    p_swap: float = 0.2
    p_flip: float = 0.1
    """move mix (normalised)"""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ConfigError(f"steps={self.steps} (must be >= 0)")
        if self.t0 is not None and not (0 < self.t0 < math.inf):
            raise ConfigError(f"t0={self.t0} (must be > 0 and finite)")
        if not 0 < self.t1_ratio <= 1:
            raise ConfigError(f"t1_ratio={self.t1_ratio} (must be in (0, 1])")
        p = (self.p_shift, self.p_move, self.p_swap, self.p_flip)
        if min(p) < 0 or not sum(p) > 0 or not all(math.isfinite(v) for v in p):
            raise ConfigError(f"move probabilities {p} (must be >= 0 and not all 0)")


@dataclass
class AnnealResult:
    """The best placement found (kept in the :class:`PlacementCost` passed in) and a trace."""

    initial_proxy: float
    best_proxy: float
    accepted: int
    illegal: int
    history: list[float] = field(default_factory=list)
    """proxy cost every 1 % of the steps"""


class _Legality:
    """Hard-macro rectangles, for 'inside the canvas and overlapping no other hard macro'."""

    def __init__(self, pc: PlacementCost) -> None:
        nl = pc.netlist
        self.pc = pc
        self.hard = nl.hard_macros
        self.slot = {int(i): k for k, i in enumerate(self.hard)}
        self.hw = nl.width[self.hard] / 2
        self.hh = nl.height[self.hard] / 2

    def ok(self, node: int, x: float, y: float, ignore: int = -1) -> bool:
        k = self.slot.get(node)
        if k is None:
            return True  # soft macros may overlap anything
        c = self.pc.canvas
        hw, hh = self.hw[k], self.hh[k]
        if x - hw < 0 or x + hw > c.width or y - hh < 0 or y + hh > c.height:
            return False
        pc = self.pc
        ox = np.abs(pc.x[self.hard] - x) < self.hw + hw
        oy = np.abs(pc.y[self.hard] - y) < self.hh + hh
        hit = ox & oy
        hit[k] = False
        if ignore >= 0:
            hit[self.slot[ignore]] = False
        return not hit.any()


def random_legal_placement(pc: PlacementCost, seed: int = 0, tries: int = 2000) -> bool:
    """Place every hard macro at a uniformly random legal position, largest first (soft macros
    and ports keep theirs); returns False if some macro found no legal spot in ``tries`` draws
    (it is then left where it was)."""
    rng = np.random.default_rng(seed)
    leg = _Legality(pc)
    nl = pc.netlist
    c = pc.canvas
    order = leg.hard[np.argsort(-(nl.width[leg.hard] * nl.height[leg.hard]), kind="stable")]
    # park every hard macro off the canvas first, so none blocks another before it is placed
    far = 10.0 * (c.width + c.height)
    for i in order:
        pc.x[i] = far
        pc.y[i] = far
    done = True
    for i in order:
        k = leg.slot[int(i)]
        placed = False
        for _ in range(tries):
            x = rng.uniform(leg.hw[k], max(c.width - leg.hw[k], leg.hw[k]))
            y = rng.uniform(leg.hh[k], max(c.height - leg.hh[k], leg.hh[k]))
            if leg.ok(int(i), float(x), float(y)):
                pc.x[i], pc.y[i] = x, y
                placed = True
                break
        done &= placed
    pc.reset()
    return done


Move = tuple[int, float, float, int | None]


def _propose(
    pc: PlacementCost,
    leg: _Legality,
    movers: np.ndarray,
    kind: int,
    frac: float,
    rng: np.random.Generator,
) -> tuple[list[Move], list[Move]] | None:
    """One proposal of ``kind`` (0 shift, 1 move, 2 swap, 3 flip) as (do, undo) lists of
    ``(node, x, y, orientation)``, or None if it would be illegal."""
    hard = leg.hard
    c = pc.canvas
    if kind == 2:  # swap two hard macros
        a, b = (int(v) for v in rng.choice(hard, 2, replace=False))
        xa, ya, xb, yb = float(pc.x[a]), float(pc.y[a]), float(pc.x[b]), float(pc.y[b])
        # each lands where the other was; the two cannot overlap each other afterwards if they
        # did not before (the centre distance is the same)
        if not (leg.ok(a, xb, yb, ignore=b) and leg.ok(b, xa, ya, ignore=a)):
            return None
        return [(a, xb, yb, None), (b, xa, ya, None)], [(b, xb, yb, None), (a, xa, ya, None)]
    if kind == 3:  # flip a hard macro
        i = int(rng.choice(hard))
        cur = int(pc.orientation[i])
        family = FLIPS if cur < 4 else FLIPS + 4  # N/FN/S/FS or E/FE/W/FW: never a 90° turn
        o = int(rng.choice(family[family != cur]))
        x, y = float(pc.x[i]), float(pc.y[i])
        return [(i, x, y, o)], [(i, x, y, cur)]
    i = int(rng.choice(movers))
    if kind == 0:  # shift, by up to a range that shrinks from half the canvas to 1 %
        scale = 0.5 * (1 - frac) + 0.01
        x = float(pc.x[i] + rng.uniform(-1, 1) * scale * c.width)
        y = float(pc.y[i] + rng.uniform(-1, 1) * scale * c.height)
    else:
        x, y = float(rng.uniform(0, c.width)), float(rng.uniform(0, c.height))
    if not leg.ok(i, x, y):
        return None
    return [(i, x, y, None)], [(i, float(pc.x[i]), float(pc.y[i]), None)]


def _apply(pc: PlacementCost, moves: list[Move]) -> None:
    for node, x, y, o in moves:
        pc.move(node, x, y, o)


def _auto_t0(
    pc: PlacementCost, leg: _Legality, movers: np.ndarray, probs: np.ndarray, seed: int
) -> float:
    """Mean |Δproxy| of up to 100 legal random proposals (each undone)."""
    rng = np.random.default_rng(seed + 1)
    base = pc.proxy()
    deltas = []
    for _ in range(400):
        prop = _propose(pc, leg, movers, int(rng.choice(4, p=probs)), 0.0, rng)
        if prop is None:
            continue
        _apply(pc, prop[0])
        deltas.append(abs(pc.proxy() - base))
        _apply(pc, prop[1])
        if len(deltas) == 100:
            break
    t0 = float(np.median(deltas)) if deltas else 0.0
    return t0 if t0 > 0 else 1e-3


def anneal(pc: PlacementCost, config: AnnealConfig | None = None) -> AnnealResult:
    """Simulated annealing of ``pc``'s macros; ``pc`` ends at the best placement found."""
    cfg = config or AnnealConfig()
    rng = np.random.default_rng(cfg.seed)
    nl = pc.netlist
    leg = _Legality(pc)
    hard = leg.hard
    movers = np.concatenate([hard, nl.soft_macros]) if cfg.move_soft else hard
    if not len(movers):
        p = pc.proxy()
        return AnnealResult(p, p, 0, 0, [p])
    probs = np.array([cfg.p_shift, cfg.p_move, cfg.p_swap, cfg.p_flip], float)
    if len(hard) < 2:
        probs[2] = 0.0
    if not len(hard):
        probs[3] = 0.0
    probs /= probs.sum()
    t0 = cfg.t0 if cfg.t0 is not None else _auto_t0(pc, leg, movers, probs, cfg.seed)
    kinds = rng.choice(4, size=cfg.steps, p=probs)
    cur = pc.proxy()
    initial = best = cur
    best_state = (pc.x.copy(), pc.y.copy(), pc.orientation.copy())
    accepted = illegal = 0
    history = [cur]
    every = max(cfg.steps // 100, 1)
    for step in range(cfg.steps):
        frac = step / max(cfg.steps - 1, 1)
        temp = t0 * cfg.t1_ratio**frac
        prop = _propose(pc, leg, movers, int(kinds[step]), frac, rng)
        if prop is None:
            illegal += 1
        else:
            _apply(pc, prop[0])
            new = pc.proxy()
            delta = new - cur
            if delta <= 0 or rng.random() < math.exp(-delta / temp):
                cur = new
                accepted += 1
                if cur < best:
                    best = cur
                    best_state = (pc.x.copy(), pc.y.copy(), pc.orientation.copy())
            else:
                _apply(pc, prop[1])
        if step % every == every - 1:
            history.append(cur)
    pc.x[:], pc.y[:], pc.orientation[:] = best_state
    pc.reset()  # the best state, recomputed from scratch (also clears rounding drift)
    return AnnealResult(initial, pc.proxy(), accepted, illegal, history)
