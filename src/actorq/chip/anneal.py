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
default the median cost change of a random proposal, so one schedule fits netlists whose moves
change the cost by 1e-4 or by 1e-1) to ``t0 · t1_ratio``.

**Soft macros by force-directed placement.** The published numbers (Mirhoseini et al. 2021;
MacroPlacement's SA 0.7552 on Ariane133) are proxies *after* the standard-cell clusters are
re-placed around the final macros with the FD placer (:mod:`actorq.chip.force`); the Nature
paper's SA also re-runs FD between macro moves. ``AnnealConfig.fd`` turns this on: FD runs once
before the first step (so the moves are judged with clusters placed around the start),
every ``fd_every`` accepted moves (0: never in between), and once more on the best placement at
the end; :attr:`AnnealResult.best_proxy` is then the proxy after that last FD, and
:attr:`AnnealResult.proxy_before_fd` the best proxy the annealing itself reached.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from actorq.chip.cost import PlacementCost
from actorq.chip.force import FDConfig, ForcePlacer
from actorq.errors import ConfigError, NetlistError

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
    fd: FDConfig | None = None
    """re-place soft macros with this force-directed schedule (before, every ``fd_every``
    accepted moves, and at the end); None: soft macros stay where they are"""
    fd_every: int = 0
    """accepted moves between FD runs during the annealing (0: only before and at the end)"""
    legalize: bool = True
    """first move hard macros that are off the canvas or overlap others to legal spots
    (:func:`legalize`), so that the result is legal; False: anneal from the placement as given"""

    def __post_init__(self) -> None:
        if self.fd_every < 0:
            raise ConfigError(f"fd_every={self.fd_every} (must be >= 0)")
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
    """the best placement's proxy; with ``fd``, after the final FD"""
    accepted: int
    illegal: int
    history: list[float] = field(default_factory=list)
    """proxy cost every 1 % of the steps"""
    proxy_before_fd: float | None = None
    """with ``fd``: the best proxy the annealing reached, before the final FD"""
    evaluations: int = 0
    """cost evaluations (one per legal proposal, plus the t0 estimate's)"""
    fd_runs: int = 0
    fd_seconds: float = 0.0
    cpu_seconds: float = 0.0
    """process CPU time of the whole call"""


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


def random_legal_placement(
    pc: PlacementCost, seed: int = 0, tries: int = 2000, restarts: int = 20
) -> bool:
    """Place every hard macro at a uniformly random legal position, largest first (soft macros
    and ports keep theirs). Sequential random packing can paint itself into a corner (on
    Ariane133 about one seed in three leaves a macro no spot in ``tries`` draws), so a failed
    attempt starts over, up to ``restarts`` times, drawing on from the same generator
    (deterministic for a seed). Returns False if every attempt failed (the last attempt's
    macros then stay where they landed, the unplaced ones off the canvas)."""
    rng = np.random.default_rng(seed)
    leg = _Legality(pc)
    nl = pc.netlist
    c = pc.canvas
    order = leg.hard[np.argsort(-(nl.width[leg.hard] * nl.height[leg.hard]), kind="stable")]
    far = 10.0 * (c.width + c.height)
    for _ in range(max(1, restarts)):
        # park every hard macro off the canvas first, so none blocks another before it is placed
        for i in order:
            pc.x[i] = far
            pc.y[i] = far
        done = True
        for i in order:
            k = leg.slot[int(i)]
            for _ in range(tries):
                x = rng.uniform(leg.hw[k], max(c.width - leg.hw[k], leg.hw[k]))
                y = rng.uniform(leg.hh[k], max(c.height - leg.hh[k], leg.hh[k]))
                if leg.ok(int(i), float(x), float(y)):
                    pc.x[i], pc.y[i] = x, y
                    break
            else:
                done = False
                break
        if done:
            break
    pc.reset()
    return done


def legalize(pc: PlacementCost, seed: int = 0, tries: int = 2000) -> int:
    """Make the hard-macro placement legal, moving few macros a short way: visited largest
    first, a macro is kept if it lies on the canvas and overlaps no macro kept before it; each
    of the others moves to the first legal spot of ``tries`` draws around its position clipped
    onto the canvas, in a window growing from nothing to the whole canvas. Returns how many moved
    (-1 if some found no spot: it is then left where it was). Ariane133's ``initial.plc`` has 18
    macros off the canvas, whose nets the evaluator does not route: annealing from it without
    this would keep them there and score an illegal placement."""
    rng = np.random.default_rng(seed)
    leg = _Legality(pc)
    nl = pc.netlist
    c = pc.canvas
    order = leg.hard[np.argsort(-(nl.width[leg.hard] * nl.height[leg.hard]), kind="stable")]
    far = 10.0 * (c.width + c.height)
    x0, y0 = pc.x.copy(), pc.y.copy()
    # first pass: park everything, bring back (largest first) each macro that is inside and
    # overlaps none brought back before it; second pass: find spots for the rest, among all
    # the kept ones (so a moved macro never displaces a legal one)
    for i in order:
        pc.x[i] = pc.y[i] = far
    todo = []
    for i in order:
        i = int(i)
        if leg.ok(i, float(x0[i]), float(y0[i])):
            pc.x[i], pc.y[i] = x0[i], y0[i]
        else:
            todo.append(i)
    moved, failed = 0, False
    for i in todo:
        k = leg.slot[i]
        hw, hh = leg.hw[k], leg.hh[k]
        cx = float(np.clip(x0[i], hw, max(c.width - hw, hw)))
        cy = float(np.clip(y0[i], hh, max(c.height - hh, hh)))
        spot = None
        for t in range(tries):
            r = (t + 1) / tries
            x = float(np.clip(cx + rng.uniform(-r, r) * c.width, hw, max(c.width - hw, hw)))
            y = float(np.clip(cy + rng.uniform(-r, r) * c.height, hh, max(c.height - hh, hh)))
            if leg.ok(i, x, y):
                spot = (x, y)
                break
        if spot is None:
            pc.x[i], pc.y[i] = x0[i], y0[i]
            failed = True
        else:
            pc.x[i], pc.y[i] = spot
            moved += 1
    pc.reset()
    return -1 if failed else moved


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
) -> tuple[float, int]:
    """Median |Δproxy| of up to 100 legal random proposals (each undone), and the number of
    cost evaluations that took."""
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
    return (t0 if t0 > 0 else 1e-3), len(deltas)


def anneal(
    pc: PlacementCost,
    config: AnnealConfig | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> AnnealResult:
    """Simulated annealing of ``pc``'s macros; ``pc`` ends at the best placement found (with
    ``config.fd``, its soft macros re-placed by FD). ``progress(step, steps, best proxy)`` is
    called a hundred times along the way (a long run can say how far it is)."""
    cfg = config or AnnealConfig()
    cpu0 = time.process_time()
    rng = np.random.default_rng(cfg.seed)
    nl = pc.netlist
    leg = _Legality(pc)
    hard = leg.hard
    placer = ForcePlacer(pc) if cfg.fd is not None else None
    fd_runs, fd_s = 0, 0.0
    initial = pc.proxy()
    if cfg.legalize and len(hard) and legalize(pc, seed=cfg.seed) < 0:
        raise NetlistError(f"{nl.name}: some hard macro has no legal spot (canvas too full?)")

    def run_fd() -> float:
        nonlocal fd_runs, fd_s
        assert placer is not None and cfg.fd is not None
        r = placer.place(cfg.fd)
        fd_runs += 1
        fd_s += r.seconds
        return r.after.proxy

    movers = np.concatenate([hard, nl.soft_macros]) if cfg.move_soft else hard
    if not len(movers):
        p = run_fd() if placer is not None else initial
        before = initial if placer is not None else None
        return AnnealResult(initial, p, 0, 0, [p], before, 0, fd_runs, fd_s,
                            time.process_time() - cpu0)  # fmt: skip
    probs = np.array([cfg.p_shift, cfg.p_move, cfg.p_swap, cfg.p_flip], float)
    if len(hard) < 2:
        probs[2] = 0.0
    if not len(hard):
        probs[3] = 0.0
    probs /= probs.sum()
    if placer is not None:
        run_fd()  # judge the moves with the clusters placed around the starting macros
    evaluations = 0
    if cfg.t0 is None:
        t0, evaluations = _auto_t0(pc, leg, movers, probs, cfg.seed)
    else:
        t0 = cfg.t0
    kinds = rng.choice(4, size=cfg.steps, p=probs)
    cur = pc.proxy()
    best = cur
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
            evaluations += 1
            delta = new - cur
            if delta <= 0 or rng.random() < math.exp(-delta / temp):
                cur = new
                accepted += 1
                if placer is not None and cfg.fd_every and accepted % cfg.fd_every == 0:
                    cur = run_fd()
                if cur < best:
                    best = cur
                    best_state = (pc.x.copy(), pc.y.copy(), pc.orientation.copy())
            else:
                _apply(pc, prop[1])
        if step % every == every - 1:
            history.append(cur)
            if progress is not None:
                progress(step + 1, cfg.steps, best)
    pc.x[:], pc.y[:], pc.orientation[:] = best_state
    pc.reset()  # the best state, recomputed from scratch (also clears rounding drift)
    before_fd = pc.proxy()
    final = run_fd() if placer is not None else before_fd
    return AnnealResult(
        initial_proxy=initial,
        best_proxy=final,
        accepted=accepted,
        illegal=illegal,
        history=history,
        proxy_before_fd=before_fd if placer is not None else None,
        evaluations=evaluations,
        fd_runs=fd_runs,
        fd_seconds=fd_s,
        cpu_seconds=time.process_time() - cpu0,
    )
