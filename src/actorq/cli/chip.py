"""``actorq chip``: place macros, draw a placement and print its costs.

    actorq chip place NETLIST [--plc initial.plc] [--method sa|random] [--steps N] [--seed S]
                      --out out.plc
    actorq chip place NETLIST --method policy --policy RUN_DIR [--precision int8|fp32]
                      --out out.plc
    actorq chip show FILE.plc --netlist NETLIST --out fig.png [--map density|congestion]
    actorq chip cost NETLIST PLC

``NETLIST`` is a shipped netlist's name (``ariane133``, ``macro_tiles_10x10``,
``sample_clustered``, ``toy_macro_stdcell``) or a circuit-training netlist file.

``--method policy`` places the hard macros with the policy of a PPO run trained with
``actorq train ppo --network chip --env chip:<netlist>``: the run's checkpointed policy, exported
at ``--precision`` (int8 by default, as actorq's actors run it), takes its greedy cell for one
macro after another in :class:`~actorq.chip.env.ChipPlacementEnv`, and the soft macros are then
placed by FD as in the env: the placement the run's evaluation (``actorq eval RUN_DIR``) scores,
through the same code (:meth:`actorq.agents.ppo.chip.ChipPolicyIO.place`). The run must have
been trained on NETLIST, or on a netlist with as many hard macros and the same grid (a policy is
built for one macro count and grid).

Bad input (a missing or malformed file, a bad flag value, a run that is not such a PPO run or
whose policy does not fit NETLIST) raises an :class:`~actorq.errors.ActorQError`, which
``actorq`` prints as one line, exiting with status 2; an output file is written whole or not at
all.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from actorq.cli.args import parse
from actorq.errors import NetlistError, shown
from actorq.inputs import is_file
from actorq.output import check_output, write_output

if TYPE_CHECKING:
    from actorq.chip.cost import CostWeights, PlacementCost
    from actorq.chip.netlist import Netlist
    from actorq.chip.plc import Placement
    from actorq.config import ExperimentConfig

MAX_STEPS = 10**9
MAX_SEED = 2**32 - 1
MAX_ASPECT = 4.0
"""The most a ``chip show`` figure's height may be, as a multiple of its width (the least: its
inverse). A canvas of a more extreme shape (a .plc allows 1e-3 by 1e12) is drawn to scale, as a
thin strip, in a figure of this shape, not in a figure too large to render (a traceback)."""


@dataclasses.dataclass
class PlaceArgs:
    """Place the hard macros (simulated annealing, random legal, or a PPO run's chip policy),
    then the soft macros by force-directed placement; write a .plc with the costs in its
    header."""

    netlist: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="NETLIST")]
    """Shipped netlist name or a netlist file (.pb.txt, optionally .gz)."""
    out: str
    """Output .plc file (written whole or not at all; an existing file only with --force)."""
    force: bool = False
    """Overwrite --out if it exists."""
    plc: str | None = None
    """Starting placement and canvas; default: the shipped initial.plc, or an initial.plc beside
    the netlist file, or circuit-training's default canvas."""
    method: Literal["sa", "random", "policy"] = "sa"
    """sa: simulated annealing from the starting placement; random: a random legal placement;
    policy: the greedy placement of a trained policy (--policy)."""
    policy: str | None = None
    """Run directory of a PPO run trained with --network chip on this netlist (or one with as
    many macros and the same grid); method policy only, and required there."""
    precision: Literal["int8", "fp32"] | None = None
    """Precision the policy runs at (method policy only); default int8, as actorq's actors."""
    steps: int = 20_000
    """Simulated-annealing proposals (method sa)."""
    seed: int = 0
    """Seed of the annealing / random placement and of FD."""
    fd: bool = True
    """Place the soft macros by force-directed placement at the end (--no-fd: leave them)."""
    density_weight: float = 0.5
    """Weight of the density cost in the proxy."""
    congestion_weight: float = 0.5
    """Weight of the congestion cost in the proxy."""


@dataclasses.dataclass
class ShowArgs:
    """Draw a placement: canvas, hard macros (blue), soft macros and standard cells (green),
    ports (red) and a heat map."""

    plc: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="PLC")]
    """The .plc file to draw."""
    netlist: str
    """Shipped netlist name or netlist file the .plc places."""
    out: str
    """Image file (.png, .pdf or .svg; written whole or not at all)."""
    force: bool = False
    """Overwrite --out if it exists."""
    map: Literal["density", "congestion", "none"] = "density"
    """Heat map under the macros: grid density, or the larger of horizontal and vertical
    congestion per cell."""


@dataclasses.dataclass
class CostArgs:
    """Print the proxy cost of a placement (wirelength, density, congestion)."""

    netlist: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="NETLIST")]
    """Shipped netlist name or netlist file."""
    plc: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="PLC")]
    """The .plc file."""
    density_weight: float = 0.5
    """Weight of the density cost in the proxy."""
    congestion_weight: float = 0.5
    """Weight of the congestion cost in the proxy."""


def _weights(density: float, congestion: float) -> CostWeights:
    from actorq.chip.cost import CostWeights

    for flag, v in (("--density-weight", density), ("--congestion-weight", congestion)):
        if not (math.isfinite(v) and 0 <= v <= 1e6):
            raise NetlistError(f"{flag} must be finite and in [0, 1e6], got {v!r}")
    return CostWeights(1.0, density, congestion)


def load_netlist_arg(spec: str) -> tuple[Netlist, Path | None]:
    """A shipped netlist by name or a netlist file, and the ``initial.plc`` that goes with it
    (None if there is none)."""
    from actorq.chip.netlist import get_netlist, load_netlist, netlist_dir, netlist_names

    if spec in netlist_names():
        return get_netlist(spec), netlist_dir(spec) / "initial.plc"
    p = Path(spec)
    if not is_file(p, shown(p), NetlistError):
        raise NetlistError(
            f"{shown(p)}: no such netlist file (or a shipped name: {', '.join(netlist_names())})"
        )
    nl = load_netlist(p)
    beside = p.parent / "initial.plc"
    return nl, (beside if is_file(beside, shown(beside), NetlistError) else None)


def _placement_cost(
    netlist: Netlist, plc: Path | None, weights: CostWeights
) -> tuple[PlacementCost, Placement | None]:
    from actorq.chip.cost import Canvas, PlacementCost
    from actorq.chip.plc import load_plc

    if plc is None:
        return PlacementCost(netlist, Canvas.default_for(netlist), weights), None
    p = load_plc(plc)
    return PlacementCost.from_placement(netlist, p, weights), p


def _print_costs(pc: PlacementCost, header: dict[str, float] | None = None) -> None:
    c = pc.costs()
    w = pc.weights
    print(f"wirelength       {c.wirelength:.3f} µm (weighted HPWL)")
    print(f"wirelength cost  {c.wirelength_cost:.6f}")
    print(f"density cost     {c.density_cost:.6f}")
    print(f"congestion cost  {c.congestion_cost:.6f}")
    print(
        f"proxy            {c.proxy:.6f} "
        f"(= {w.wirelength:g}·wirelength + {w.density:g}·density + {w.congestion:g}·congestion)"
    )
    if header:
        shown = ", ".join(f"{k} {v:.10g}" for k, v in header.items())
        print(f"file header says: {shown}")


def _check_method_flags(a: PlaceArgs) -> None:
    if a.method == "policy":
        if a.policy is None:
            raise NetlistError(
                "--method policy needs --policy RUN_DIR (a PPO run trained with --network chip)"
            )
        return
    for flag, v in (("--policy", a.policy), ("--precision", a.precision)):
        if v is not None:
            raise NetlistError(f"{flag} goes with --method policy only (got --method {a.method})")


def _place_by_policy(
    a: PlaceArgs, nl: Netlist, base: Placement | None, weights: CostWeights
) -> tuple[PlacementCost, str]:
    """The greedy placement of ``a.policy``'s policy on ``nl`` (module docstring): the
    placement cost holding it, and a line saying what was done."""
    from actorq.agents.ppo.chip import ChipPolicyIO
    from actorq.agents.ppo.config import PPOConfig
    from actorq.chip.env import ChipPlacementEnv
    from actorq.chip.force import FDConfig
    from actorq.quant.model_snapshot import ModelSnapshot
    from actorq.run import load_run_policy

    assert a.policy is not None
    run = Path(a.policy)
    # as the run's evaluation env (make_env("chip:<netlist>")), with this command's canvas,
    # weights and FD settings (their defaults are the env's)
    env = ChipPlacementEnv(nl, base, fd=FDConfig(seed=a.seed), weights=weights, use_fd=a.fd)

    def require(cfg: ExperimentConfig) -> None:
        if isinstance(cfg, PPOConfig):
            if cfg.network == "chip":
                return
            what = f"a PPO --network {cfg.network}"
        else:
            what = f"a {cfg.agent.upper()}"
        raise NetlistError(
            f"--policy {shown(run)} is {what} run on {cfg.env}; --method policy needs a PPO "
            "run trained with --network chip"
        )

    precision = a.precision or "int8"
    cfg, io, data = load_run_policy(str(run), precision, require=require)
    assert isinstance(io, ChipPolicyIO)
    pol = io.policy
    obs_dim = int((env.observation_space.shape or (0,))[0])
    if (pol.n, pol.rows, pol.cols, pol.obs_dim) != (env.n, env.rows, env.cols, obs_dim):
        raise NetlistError(
            f"--policy {shown(run)} was trained on {cfg.env} ({pol.n} hard macros, a "
            f"{pol.rows}×{pol.cols} grid) and does not fit {nl.name} ({env.n} hard macros, a "
            f"{env.rows}×{env.cols} grid)"
        )
    _, info = io.place(data, env)
    if info.get("reason") != "placed":
        raise NetlistError(
            f"the greedy placement of {shown(run)}'s policy on {nl.name} is infeasible: "
            f"{info.get('reason')}"
        )
    version = ModelSnapshot.from_bytes(data).version
    note = (
        f"greedy placement by the {precision} policy of {shown(run)} (PPO on {cfg.env}, "
        f"version {version})" + (f", then FD seed {a.seed}" if a.fd else "")
    )
    return env.pc, note


class _AnnealProgress:
    """A line every 10 s while annealing runs (a long ``--steps`` shows how far it is)."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s, self.last = every_s, time.monotonic()

    def __call__(self, step: int, steps: int, best: float) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s and step < steps:
            self.last = now
            print(f"  annealing: step {step:,} of {steps:,}, best proxy {best:.4f}", flush=True)


def cmd_place(a: PlaceArgs) -> int:
    from actorq.chip.anneal import AnnealConfig, anneal, random_legal_placement
    from actorq.chip.force import FDConfig, ForcePlacer
    from actorq.chip.plc import format_plc, load_plc

    if not 0 <= a.steps <= MAX_STEPS:
        raise NetlistError(f"--steps must be in [0, {MAX_STEPS}], got {a.steps}")
    if not 0 <= a.seed <= MAX_SEED:
        raise NetlistError(f"--seed must be in [0, {MAX_SEED}], got {a.seed}")
    _check_method_flags(a)
    if a.method == "sa":  # the move kinds are drawn up front: 8 bytes a step
        from actorq.resources import check_memory

        check_memory({f"{a.steps:,} annealing steps (--steps)": 8 * a.steps}, "this placement")
    weights = _weights(a.density_weight, a.congestion_weight)
    out = check_output(a.out, "--out", force=a.force, suffixes=(".plc",), error=NetlistError)
    nl, default_plc = load_netlist_arg(a.netlist)
    plc_path = Path(a.plc) if a.plc is not None else default_plc
    if a.method == "policy":
        base = load_plc(plc_path) if plc_path is not None else None
        pc, note = _place_by_policy(a, nl, base, weights)
    else:
        pc, base = _placement_cost(nl, plc_path, weights)
        start = pc.proxy()
        fd = FDConfig(seed=a.seed) if a.fd else None
        if a.method == "random":
            if not random_legal_placement(pc, seed=a.seed):
                raise NetlistError(
                    f"{nl.name}: found no legal spot for some macro (canvas too full?)"
                )
            if fd is not None:
                ForcePlacer(pc).place(fd)
            note = f"random legal placement, seed {a.seed}" + (", then FD" if fd else "")
        else:
            res = anneal(pc, AnnealConfig(steps=a.steps, seed=a.seed, fd=fd), _AnnealProgress())
            note = (
                f"simulated annealing, {a.steps} steps, seed {a.seed}: proxy {start:.4f} -> "
                f"{res.proxy_before_fd if fd else res.best_proxy:.4f}"
                + (f", {res.best_proxy:.4f} after FD" if fd else "")
            )
    p = pc.placement(base)
    p.costs["Proxy cost"] = pc.proxy()
    text = format_plc(p, comment=f"actorq chip place {nl.name}: {note}")
    write_output(out, text, "--out", error=NetlistError)
    print(note)
    _print_costs(pc)
    print(f"wrote {out}")
    return 0


def cmd_cost(a: CostArgs) -> int:
    weights = _weights(a.density_weight, a.congestion_weight)
    nl, _ = load_netlist_arg(a.netlist)
    pc, p = _placement_cost(nl, Path(a.plc), weights)
    _print_costs(pc, p.costs if p is not None else None)
    _warn_off_canvas(pc)
    return 0


def off_canvas_macros(pc: PlacementCost) -> int:
    """Hard and soft macros not wholly inside the canvas (a rotated macro's sides swapped)."""
    import numpy as np

    from actorq.chip.netlist import HARD_MACRO, ORIENTATIONS, SOFT_MACRO

    nl, c = pc.netlist, pc.canvas
    macro = np.isin(nl.kind, (HARD_MACRO, SOFT_MACRO))
    turned = np.isin(pc.orientation, [ORIENTATIONS.index(o) for o in ("E", "FE", "W", "FW")])
    hw = np.where(turned, nl.height, nl.width) / 2
    hh = np.where(turned, nl.width, nl.height) / 2
    out = (pc.x - hw < 0) | (pc.x + hw > c.width) | (pc.y - hh < 0) | (pc.y + hh > c.height)
    return int((macro & out).sum())


def _warn_off_canvas(pc: PlacementCost) -> None:
    """Say so when macros lie outside the canvas: density and congestion then count only what
    is inside (as circuit-training's evaluator does), so they read lower than a legal placement
    of the same macros would."""
    n = off_canvas_macros(pc)
    if n:
        print(
            f"actorq: warning: {n} macro{'s' if n > 1 else ''} lie outside the "
            f"{pc.canvas.width:g} x {pc.canvas.height:g} canvas: density and congestion count "
            "only their parts inside (as circuit-training's evaluator does) and read lower than "
            "a legal placement's",
            file=sys.stderr,
        )


def _figsize(width: float, height: float, inches: float = 7.0) -> tuple[float, float]:
    """A ``chip show`` figure's size in inches: the canvas's shape, within :data:`MAX_ASPECT`
    either way (the axes keep the canvas's true aspect), plus room for the title."""
    aspect = min(max(height / width, 1 / MAX_ASPECT), MAX_ASPECT)
    return inches, inches * aspect + 0.6


def cmd_show(a: ShowArgs) -> int:
    out = check_output(
        a.out, "--out", force=a.force, suffixes=(".png", ".pdf", ".svg"), error=NetlistError
    )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise NetlistError(
            "actorq chip show needs matplotlib: pip install 'actorq[bench]'"
        ) from None
    import numpy as np

    from actorq.chip.netlist import PORT, SOFT_MACRO, STDCELL

    nl, _ = load_netlist_arg(a.netlist)
    pc, _ = _placement_cost(nl, Path(a.plc), _weights(0.5, 0.5))
    _warn_off_canvas(pc)
    c = pc.canvas
    costs = pc.costs()
    fig, ax = plt.subplots(figsize=_figsize(c.width, c.height))
    try:
        if a.map != "none":
            if a.map == "density":
                grid, label = pc.density_grid(), "density"
            else:
                h, v = pc.congestion_grids()
                grid, label = np.maximum(h, v), "congestion (max of H, V)"
            im = ax.imshow(
                grid,
                origin="lower",
                extent=(0, c.width, 0, c.height),
                cmap="magma",
                alpha=0.75,
                interpolation="nearest",
            )
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=label)
        ax.add_patch(Rectangle((0, 0), c.width, c.height, fill=False, lw=1.5, ec="black"))
        for i in nl.indices(SOFT_MACRO, STDCELL):
            w, hh = nl.width[i], nl.height[i]
            ax.add_patch(
                Rectangle((pc.x[i] - w / 2, pc.y[i] - hh / 2), w, hh, fc="tab:green", alpha=0.3,
                          lw=0.3, ec="darkgreen")
            )  # fmt: skip
        for i in nl.hard_macros:
            w, hh = nl.width[i], nl.height[i]
            ax.add_patch(
                Rectangle((pc.x[i] - w / 2, pc.y[i] - hh / 2), w, hh, fc="tab:blue", alpha=0.7,
                          lw=0.5, ec="navy")
            )  # fmt: skip
        ports = np.flatnonzero(nl.kind == PORT)
        ax.scatter(pc.x[ports], pc.y[ports], s=4, c="tab:red", label="ports", zorder=3)
        pad = 0.03 * max(c.width, c.height)
        ax.set_xlim(-pad, c.width + pad)
        ax.set_ylim(-pad, c.height + pad)
        ax.set_aspect("equal")
        ax.set_title(
            f"{nl.name}: proxy {costs.proxy:.4f}\n(wirelength {costs.wirelength_cost:.4f}, "
            f"density {costs.density_cost:.4f}, congestion {costs.congestion_cost:.4f})",
            fontsize=9,
        )
        fmt = out.suffix.lower().lstrip(".")
        write_output(
            out, lambda f: fig.savefig(f, dpi=150, format=fmt), "--out", error=NetlistError
        )
    finally:
        plt.close(fig)
    print(f"wrote {out}")
    return 0


USAGE = """usage: actorq chip {place,show,cost} ...

  actorq chip place NETLIST --out out.plc [--plc initial.plc] [--method sa|random] [--steps N]
                    [--seed S] [--no-fd]
  actorq chip place NETLIST --out out.plc --method policy --policy RUN_DIR [--precision int8|fp32]
                    [--plc initial.plc] [--seed S] [--no-fd]
  actorq chip show FILE.plc --netlist NETLIST --out fig.png [--map density|congestion|none]
  actorq chip cost NETLIST PLC

NETLIST: a shipped netlist (ariane133, macro_tiles_10x10, sample_clustered, toy_macro_stdcell)
or a circuit-training netlist file. RUN_DIR: a run of actorq train ppo --network chip on NETLIST
(or a netlist with as many hard macros and the same grid); its greedy placement, soft macros by FD.
"""


def main(argv: list[str]) -> int:
    """Entry from ``actorq chip ...``; NetlistError propagates to ``actorq``'s handler."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    sub, rest = argv[0], argv[1:]
    if sub == "place":
        return cmd_place(parse(PlaceArgs, rest, "actorq chip place"))
    if sub == "show":
        return cmd_show(parse(ShowArgs, rest, "actorq chip show"))
    if sub == "cost":
        return cmd_cost(parse(CostArgs, rest, "actorq chip cost"))
    print(
        f"actorq: error: unknown chip command {sub!r}; expected place, show or cost",
        file=sys.stderr,
    )
    return 2
