"""A Gymnasium environment for macro placement, as circuit-training poses it.

Mirhoseini et al. 2021 (Nature 594, "A graph placement methodology for fast chip design") place
the hard macros one at a time, largest first, each onto the centre of a cell of the placement
grid; once all are placed, the standard-cell clusters are placed by force-directed placement and
the episode's only reward is the negative proxy cost (wirelength + λ·density + γ·congestion).
google-research/circuit_training's ``environment/environment.py`` does the same with an action
mask of the cells where the current macro fits.

``ChipPlacementEnv`` (``make_env("chip:ariane133")`` or ``make_env("chip:path/netlist.pb.txt")``):

* **action** ``Discrete(rows · cols)``: cell ``row · cols + col``; the macro's centre goes to the
  cell's centre (its orientation stays the netlist's);
* **action mask**: the cells where the current macro lies wholly on the canvas and overlaps no
  macro placed before it, in ``info["action_mask"]`` (int8) and in the observation;
* **observation** a flat ``Box(0, 1)`` float32 vector, laid out as :attr:`ChipPlacementEnv.layout`
  says, macros in placement order (:attr:`ChipPlacementEnv.order`): per-macro static features
  (width / canvas width, height / canvas height, pins / most pins on a macro), per-macro
  placement (x / width, y / height, placed flag), a one-hot of the macro to place now, the
  density of the macros placed so far on the grid (``rows · cols``), and the action mask
  (``rows · cols``). A flat vector is what actorq's agents take;
  :meth:`ChipPlacementEnv.split` cuts it back into named arrays for a graph policy;
* **reward** 0 until the last macro is placed; then the soft macros are placed by FD
  (:mod:`actorq.chip.force`) and the reward is ``−proxy`` (``info["costs"]`` holds the terms);
* **infeasible** states end the episode with reward ``−infeasible_penalty`` and
  ``info["reason"]``: no legal cell is left for the next macro, or the action was not a legal
  cell.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from actorq.chip.cost import Canvas, CostWeights, PlacementCost
from actorq.chip.force import FDConfig, ForcePlacer
from actorq.chip.netlist import (
    HARD_PIN,
    Netlist,
    get_netlist,
    load_netlist,
    netlist_dir,
    netlist_names,
)
from actorq.chip.plc import Placement, load_plc
from actorq.errors import EnvIdError, NetlistError, shown
from actorq.inputs import is_file

STATIC_FEATURES = 3
PLACED_FEATURES = 3


def resolve_netlist(spec: str) -> tuple[Netlist, Placement | None]:
    """A shipped netlist by name (with its ``initial.plc``), or a netlist file (with an
    ``initial.plc`` beside it, if there is one)."""
    if spec in netlist_names():
        return get_netlist(spec), load_plc(netlist_dir(spec) / "initial.plc")
    p = Path(spec)
    if not is_file(p, f"chip:{shown(spec)}", EnvIdError):
        raise EnvIdError(
            f"chip:{spec}: not a shipped netlist ({', '.join(netlist_names())}) nor a file"
        )
    nl = load_netlist(p)
    plc = p.parent / "initial.plc"
    return nl, (load_plc(plc) if is_file(plc, shown(plc), EnvIdError) else None)


def validate_chip_id(name: str) -> None:
    """Raise :class:`EnvIdError` unless ``chip:<name>`` names a shipped netlist or a file."""
    if name in netlist_names():
        return
    if not is_file(name, f"chip:{shown(name)}", EnvIdError):
        raise EnvIdError(
            f"unknown chip netlist {name!r}: expected one of {', '.join(netlist_names())} "
            "or a netlist file path"
        )


def make_chip_env(name: str, **kwargs: Any) -> ChipPlacementEnv:
    """``make_env("chip:<name>")``: ``name`` a shipped netlist or a netlist file."""
    try:
        nl, plc = resolve_netlist(name)
    except NetlistError as e:
        raise EnvIdError(f"chip:{name}: {e}") from None
    return ChipPlacementEnv(nl, plc, **kwargs)


class ChipPlacementEnv(gym.Env[np.ndarray, Any]):
    """Hard macros placed one per step onto grid cells, largest first (module docstring)."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(
        self,
        netlist: Netlist | str,
        placement: Placement | None = None,
        fd: FDConfig | None = None,
        weights: CostWeights | None = None,
        infeasible_penalty: float = 2.0,
        use_fd: bool = True,
    ) -> None:
        if isinstance(netlist, str):
            netlist, plc = resolve_netlist(netlist)
            placement = placement or plc
        if not (np.isfinite(infeasible_penalty) and infeasible_penalty >= 0):
            raise NetlistError(f"infeasible_penalty={infeasible_penalty!r} (finite, >= 0)")
        nl = netlist
        if placement is not None:
            self.pc = PlacementCost.from_placement(nl, placement, weights)
        else:
            self.pc = PlacementCost(nl, Canvas.default_for(nl), weights)
        self.netlist = nl
        self.fd = fd or FDConfig()
        self.use_fd = use_fd
        self.penalty = float(infeasible_penalty)
        self.placer = ForcePlacer(self.pc) if use_fd else None
        c = self.pc.canvas
        self.cols, self.rows = c.columns, c.rows
        self.gw, self.gh = c.width / self.cols, c.height / self.rows
        hard = nl.hard_macros
        area = nl.width[hard] * nl.height[hard]
        self.order = hard[np.argsort(-area, kind="stable")]  # largest first, ties by index
        n = len(self.order)
        self.n = n
        self.hw = nl.width[self.order] / 2
        self.hh = nl.height[self.order] / 2
        cc, rr = np.meshgrid(np.arange(self.cols), np.arange(self.rows))
        self.cx = ((cc.ravel() + 0.5) * self.gw).astype(np.float64)
        self.cy = ((rr.ravel() + 0.5) * self.gh).astype(np.float64)
        ncell = self.rows * self.cols
        eps = 1e-9 * max(c.width, c.height)
        # where each macro lies wholly on the canvas: fixed for the episode
        self.on_canvas = (
            (self.cx[None, :] - self.hw[:, None] >= -eps)
            & (self.cx[None, :] + self.hw[:, None] <= c.width + eps)
            & (self.cy[None, :] - self.hh[:, None] >= -eps)
            & (self.cy[None, :] + self.hh[:, None] <= c.height + eps)
        )
        pins = np.flatnonzero(nl.kind == HARD_PIN)
        npins = np.bincount(nl.parent[pins], minlength=nl.num_nodes)[self.order].astype(float)
        self.static = np.stack(
            [
                np.minimum(nl.width[self.order] / c.width, 1.0),
                np.minimum(nl.height[self.order] / c.height, 1.0),
                npins / max(npins.max(initial=0.0), 1.0),
            ],
            axis=1,
        ).astype(np.float32)
        sizes = {
            "static": n * STATIC_FEATURES,
            "placed": n * PLACED_FEATURES,
            "current": n,
            "density": ncell,
            "mask": ncell,
        }
        self.layout: dict[str, slice] = {}
        at = 0
        for k, v in sizes.items():
            self.layout[k] = slice(at, at + v)
            at += v
        self.observation_space = spaces.Box(0.0, 1.0, (at,), np.float32)
        self.action_space = spaces.Discrete(ncell)
        self._t = 0
        self._x = np.zeros(n)
        self._y = np.zeros(n)
        self._density = np.zeros((self.rows, self.cols))
        self._mask = np.zeros(ncell, bool)
        self._done = True

    # ---- gymnasium API -----------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._x[:] = 0.0
        self._y[:] = 0.0
        self._density[:] = 0.0
        self._done = False
        self._mask = self._legal(0)
        return self._obs(), {"action_mask": self._mask.astype(np.int8)}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("step() after the episode ended: call reset()")
        a = int(action)
        if self.n == 0:  # nothing to place: the episode is the soft-macro placement alone
            return self._finish()
        if not self._mask.any():
            return self._infeasible(f"no legal cell for macro {self._name(self._t)}")
        if not (0 <= a < len(self._mask) and self._mask[a]):
            return self._infeasible(f"action {a} is not a legal cell for {self._name(self._t)}")
        k = self._t
        self._x[k], self._y[k] = self.cx[a], self.cy[a]
        self._add_density(k)
        self._t += 1
        if self._t == self.n:
            return self._finish()
        self._mask = self._legal(self._t)
        info: dict[str, Any] = {"action_mask": self._mask.astype(np.int8)}
        if not self._mask.any():
            return self._infeasible(f"no legal cell for macro {self._name(self._t)}")
        return self._obs(), 0.0, False, False, info

    # ---- helpers ------------------------------------------------------------------------

    def split(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """The named parts of an observation: static (n, 3), placed (n, 3), current (n,),
        density (rows, cols), mask (rows, cols)."""
        n = self.n
        shapes = {
            "static": (n, STATIC_FEATURES),
            "placed": (n, PLACED_FEATURES),
            "current": (n,),
            "density": (self.rows, self.cols),
            "mask": (self.rows, self.cols),
        }
        return {k: obs[s].reshape(shapes[k]) for k, s in self.layout.items()}

    def _name(self, k: int) -> str:
        return self.netlist.names[int(self.order[k])]

    def _legal(self, k: int) -> np.ndarray:
        """Cells where macro ``k`` (in placement order) fits: on the canvas, no overlap with
        macros 0..k-1."""
        ok = self.on_canvas[k].copy()
        if k:
            # touching edges are allowed; a sliver of overlap from rounding is not an overlap
            tol = 1e-9 * max(self.pc.canvas.width, self.pc.canvas.height)
            ox = np.abs(self.cx[:, None] - self._x[None, :k]) < self.hw[k] + self.hw[:k] - tol
            oy = np.abs(self.cy[:, None] - self._y[None, :k]) < self.hh[k] + self.hh[:k] - tol
            ok &= ~np.any(ox & oy, axis=1)
        return ok

    def _add_density(self, k: int) -> None:
        g = self.pc.grid
        x0, x1 = self._x[k] - self.hw[k], self._x[k] + self.hw[k]
        y0, y1 = self._y[k] - self.hh[k], self._y[k] + self.hh[k]
        xov = np.clip(np.minimum(x1, g.col_lo + g.gw) - np.maximum(x0, g.col_lo), 0.0, None)
        yov = np.clip(np.minimum(y1, g.row_lo + g.gh) - np.maximum(y0, g.row_lo), 0.0, None)
        self._density += np.outer(yov, xov) / (g.gw * g.gh)

    def _obs(self) -> np.ndarray:
        c = self.pc.canvas
        placed = np.zeros((self.n, PLACED_FEATURES), np.float32)
        t = self._t
        placed[:t, 0] = self._x[:t] / c.width
        placed[:t, 1] = self._y[:t] / c.height
        placed[:t, 2] = 1.0
        current = np.zeros(self.n, np.float32)
        if t < self.n:
            current[t] = 1.0
        parts = [
            self.static.ravel(),
            placed.ravel(),
            current,
            np.clip(self._density, 0.0, 1.0).ravel().astype(np.float32),
            self._mask.astype(np.float32),
        ]
        return np.clip(np.concatenate(parts), 0.0, 1.0).astype(np.float32)

    def _finish(self) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        pc = self.pc
        pc.x[self.order] = self._x
        pc.y[self.order] = self._y
        pc.reset()
        if self.placer is not None:
            self.placer.place(self.fd)
        costs = pc.costs()
        self._done = True
        self._mask = np.zeros_like(self._mask)
        info = {
            "action_mask": self._mask.astype(np.int8),
            "costs": dataclasses.asdict(costs),
            "proxy": costs.proxy,
            "reason": "placed",
        }
        return self._obs(), -float(costs.proxy), True, False, info

    def _infeasible(self, reason: str) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._done = True
        self._mask = np.zeros_like(self._mask)
        info = {"action_mask": self._mask.astype(np.int8), "reason": reason}
        return self._obs(), -self.penalty, True, False, info


def random_legal_proxies(env: ChipPlacementEnv, episodes: int, seed: int) -> np.ndarray:
    """The random legal placement baseline in the env's own action space: each macro on a
    uniformly random legal cell, soft macros by FD; the proxy cost of each of ``episodes``. An
    episode that ends infeasible (no legal cell left for a macro) counts as the env's penalty,
    its ``-reward``, as a policy's does."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(episodes):
        _, info = env.reset(seed=0)
        while True:
            a = int(rng.choice(np.flatnonzero(info["action_mask"])))
            _, reward, term, trunc, info = env.step(a)
            if term or trunc:
                out.append(float(info["proxy"]) if "proxy" in info else -float(reward))
                break
    return np.asarray(out)


def random_legal_observations(env: ChipPlacementEnv, steps: int, seed: int = 0) -> np.ndarray:
    """Observations ``(k, obs_dim)`` of one episode's first ``steps`` random legal steps
    (terminal ones left out: their mask is empty)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if term or trunc:
            break
        out.append(obs)
    return np.stack(out)
