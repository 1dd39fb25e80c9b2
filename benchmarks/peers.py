"""What the side-by-side benchmarks against other frameworks share (benchmarks/dqn_peers.py,
benchmarks/ppo_peers.py): the cell matrix, one subprocess per cell, the evaluation of a peer's
policy, statistics over seeds and the facts recorded with every result.

A benchmark is a matrix of cells, one per (case, framework, seed). Each cell trains in its own
subprocess (``<script> --cell JSON``: no state shared between cells, a crash costs one cell) and
writes ``<results>/<case>/<framework>-s<seed>.json`` atomically when it finishes. A cell whose
JSON exists is skipped, so an interrupted matrix resumes where it stopped; an existing cell with
other budget settings is refused (a benchmark never mixes budgets silently).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime as dt
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from actorq.bench import machine

#: Every cell's environment: one BLAS/OpenMP thread (the frameworks set their torch threads to
#: 1 too), unbuffered output so the parent can stream it.
CELL_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
CURVE_METRIC = "charts/eval_return"  # actorq metrics.csv: one row per periodic evaluation
EVAL_TIME_METRIC = "perf/eval_s"  # actorq metrics.csv: cumulative evaluation seconds
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def say(msg: str) -> None:
    """A progress line on stdout, flushed (the parent streams the cells' output)."""
    print(msg, flush=True)


def machine_info() -> dict[str, Any]:
    """actorq.bench's machine facts plus the load now and the versions of both frameworks."""
    versions = {}
    for pkg in ("actorq", "stable-baselines3", "torch", "gymnasium", "mujoco", "dm-control"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        **machine.machine_info(),
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
    }


REPO = Path(__file__).resolve().parents[1]


def portable(data: Any) -> Any:
    """``data`` with every absolute path inside the repository made relative to its root:
    committed results must not carry the machine's checkout path (cells get absolute paths
    because they run in other working directories)."""
    if isinstance(data, dict):
        return {k: portable(v) for k, v in data.items()}
    if isinstance(data, list):
        return [portable(v) for v in data]
    if isinstance(data, str) and data.startswith(f"{REPO}{os.sep}"):
        return data[len(str(REPO)) + 1 :]
    return data


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: never half a file;
    paths inside the repository written relative to its root (:func:`portable`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(portable(data), indent=1))
    os.replace(tmp, path)


def graph_setup_problem(cluster: str, graphs: Sequence[str]) -> str | None:
    """One line naming what is wrong with a graph benchmark's ``--cluster`` and ``--graphs``
    (None when both are valid)."""
    from actorq.errors import ActorQError
    from actorq.graphopt.cluster import get_cluster
    from actorq.graphopt.suite import is_graph_name

    try:
        get_cluster(cluster)
    except ActorQError as e:
        return f"error: {e}"
    bad = [g for g in graphs if not is_graph_name(g)]
    return f"error: unknown graph(s) {', '.join(bad)}" if bad else None


def graph_cells(
    root: Path, graphs: Sequence[str], suffix: str, command: str,
    compute: Callable[[str], dict[str, Any]],
) -> list[dict[str, Any]]:  # fmt: skip
    """One cell per graph, ``root/<graph><suffix>.json``: read when present (a benchmark
    resumes where it stopped), else ``compute(graph)``, stamped with the command and machine,
    written atomically."""
    root.mkdir(parents=True, exist_ok=True)
    cells = []
    for graph in graphs:
        p = root / f"{graph}{suffix}.json"
        if p.is_file():
            cells.append(json.loads(p.read_text()))
            continue
        cell = compute(graph)
        cell.update(command=command, machine=machine_info())
        write_json_atomic(p, cell)
        cells.append(cell)
    return cells


def first_at_or_above(
    curve: Sequence[dict[str, Any]], target: float | None
) -> dict[str, Any] | None:
    """The first evaluation point whose mean return is >= ``target``."""
    if target is None:
        return None
    return next((p for p in curve if p["return"] >= target), None)


class GreedyEval:
    """Deterministic evaluation of an SB3 policy: ``episodes`` separately seeded envs stepped in
    lock-step (one batched ``predict`` per step), returns summed until each episode ends. The
    seeds are actorq's own evaluation seeds, so both frameworks play the same episodes."""

    def __init__(self, env_id: str, episodes: int) -> None:
        from actorq.envs import make_env

        self.envs = [make_env(env_id) for _ in range(episodes)]

    def __call__(
        self, model: Any, seed: int, normalize: Callable[[np.ndarray], np.ndarray] | None = None
    ) -> np.ndarray:
        n = len(self.envs)
        obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        returns = np.zeros(n)
        alive = np.ones(n, bool)
        while alive.any():
            idx = np.flatnonzero(alive)
            batch = obs[idx] if normalize is None else normalize(obs[idx])
            actions, _ = model.predict(batch, deterministic=True)
            for j, i in enumerate(idx):
                o, r, term, trunc, _ = self.envs[i].step(actions[j])
                obs[i] = o
                returns[i] += float(r)
                if term or trunc:
                    alive[i] = False
        return returns

    def close(self) -> None:
        for env in self.envs:
            env.close()


# -- actorq's side ----------------------------------------------------------------------------
def read_metrics_csv(path: Path) -> dict[str, list[tuple[int, float, float | None]]]:
    """actorq's metrics.csv (``step,wall_time,metric,value``) as
    ``{metric: [(step, value, wall_time or None), ...]}``."""
    out: dict[str, list[tuple[int, float, float | None]]] = {}
    if not path.exists():
        return out
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            wall = row.get("wall_time")
            out.setdefault(row["metric"], []).append(
                (int(float(row["step"])), float(row["value"]), float(wall) if wall else None)
            )
    return out


def eval_seconds(points: list[tuple[int, float, float | None]], step: int, strict: bool) -> float:
    """Cumulative evaluation seconds (``perf/eval_s`` rows) logged before ``step`` (``strict``)
    or at or before it; 0 if none yet."""
    before = [v for s, v, _ in points if (s < step if strict else s <= step)]
    return before[-1] if before else 0.0


def result_fields(result: Any) -> dict[str, Any]:
    """The scalar fields of actorq's TrainResult, for the cell JSON."""
    d = dataclasses.asdict(result)
    return {k: v for k, v in d.items() if v is None or isinstance(v, str | int | float | bool)}


def plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


# -- statistics over seeds ----------------------------------------------------------------------
def times_to_target(cells: Sequence[dict[str, Any]]) -> np.ndarray:
    """Time to target per cell; +inf for a cell that never reached it (a failure)."""
    return np.array(
        [c["time_to_target_s"] if c["time_to_target_s"] is not None else math.inf for c in cells],
        dtype=float,
    )


def iqm(x: np.ndarray) -> float:
    """Interquartile mean: the mean after trimming int(n/4) values from each end (rliable's
    ``scipy.stats.trim_mean(x, 0.25)``); +inf when a failure falls in the middle half."""
    xs = np.sort(np.asarray(x, dtype=float))
    k = int(0.25 * len(xs))
    mid = xs[k : len(xs) - k]
    return float(np.mean(mid)) if len(mid) else math.nan


def ratio_ci(
    num: np.ndarray, den: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float, float, float]:
    """median(num) / median(den) and its percentile-bootstrap 95% CI, seeds resampled with
    replacement within each framework (independently: seed i of one framework shares nothing
    with seed i of another). Returns (ratio, low, high, share of resamples undefined), where
    undefined is inf/inf (both medians failures); those resamples are dropped."""

    def ratio(a: float, b: float) -> float:
        if math.isinf(a) and math.isinf(b):
            return math.nan
        return a / b if b > 0 else math.inf

    point = ratio(float(np.median(num)), float(np.median(den)))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    a = np.median(rng.choice(num, size=(resamples, len(num))), axis=1)
    b = np.median(rng.choice(den, size=(resamples, len(den))), axis=1)
    rs = np.array([ratio(x, y) for x, y in zip(a, b, strict=True)])
    ok = rs[~np.isnan(rs)]
    if not len(ok):
        return point, math.nan, math.nan, 1.0
    lo, hi = np.quantile(ok, [0.025, 0.975], method="inverted_cdf")  # no interpolation: inf-safe
    return point, float(lo), float(hi), 1.0 - len(ok) / len(rs)


def num(x: float | None, fmt: str = ",.0f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def mean_std(xs: Sequence[float]) -> str:
    return f"{np.mean(xs):.1f} ± {np.std(xs):.1f}" if len(xs) else "—"


def report_head(title: str, command: str, cells: list[dict[str, Any]]) -> list[str]:
    """A report's first lines: title, command, machine and versions, when the cells ran."""
    m = machine_info()
    lines = [
        f"# {title}",
        "",
        f"`{command}`",
        "",
        f"- report written {m['date']} on {m['cpu_model']} ({m['cores_usable']} usable cores, "
        f"load average {', '.join(map(str, m['load_avg']))}); git {m['git_commit']}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
    ]
    if cells:
        cpus = sorted({c["machine"]["cpu_model"] for c in cells})
        dates = sorted(c["machine"]["date"] for c in cells)
        lines.append(f"- cells ran {dates[0]} .. {dates[-1]} on: {'; '.join(cpus)}")
    return lines


# -- the matrix ---------------------------------------------------------------------------------
def matrix_args(
    description: str, results: str, frameworks: Sequence[str]
) -> argparse.ArgumentParser:
    """The options every peers benchmark takes; the script adds its case-specific ones."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--case", help="benchmark case (required)")
    ap.add_argument("--seeds", type=int, nargs="+", help="default: the case's")
    ap.add_argument(
        "--frameworks", nargs="+", choices=frameworks, default=["sb3", "actorq-int8", "actorq-fp32"]
    )
    ap.add_argument("--results", type=Path, default=Path(results))
    ap.add_argument("--eval-every", type=int, help="env steps between evaluations")
    ap.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell (JSON)
    return ap


def run_cell_main(cell_json: str, run_cell: Callable[[dict[str, Any]], None]) -> int:
    """The child process's side of :func:`spawn_cell`."""
    try:
        run_cell(json.loads(cell_json))
    except KeyboardInterrupt:
        say("    interrupted: cell not recorded")
        return 130
    return 0


def spawn_cell(script: Path, cell: dict[str, Any], log_path: Path) -> int:
    """Run one cell in a subprocess (``script --cell JSON``), streaming its output to stdout and
    to ``log_path``. Returns its exit status; Ctrl-C waits for the cell to stop and re-raises."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **CELL_ENV}
    cmd = [sys.executable, str(script.resolve()), "--cell", json.dumps(cell)]
    with open(log_path, "w") as log:
        # Its own process group: the terminal's Ctrl-C reaches only this process, which passes
        # exactly one SIGINT on (a second one would make actorq stop without cleaning up).
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            process_group=0,
            cwd=log_path.parent,  # MuJoCo writes MUJOCO_LOG.TXT into the working directory
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                log.write(line)
            return proc.wait()
        except KeyboardInterrupt:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def load_cells(case_dir: Path, frameworks: Sequence[str]) -> list[dict[str, Any]]:
    """Every finished cell JSON of a case, in ``frameworks`` order then seed."""
    cells = [json.loads(p.read_text()) for p in sorted(case_dir.glob("*-s*.json"))]
    order = {f: i for i, f in enumerate(frameworks)}
    return sorted(cells, key=lambda c: (order.get(c["framework"], 99), c["framework"], c["seed"]))


def run_matrix(
    script: Path,
    case: str,
    case_dir: Path,
    frameworks: Sequence[str],
    seeds: Sequence[int],
    settings: dict[str, Any],
    render: Callable[[list[dict[str, Any]], str], str],
    all_frameworks: Sequence[str],
) -> int:
    """Run every missing (framework, seed) cell of ``case`` in turn, then write and print the
    report (``render(cells, command)``). ``settings`` (budget, evaluation interval) go into every
    cell and must match those of cells already there. Exit status: 0 when every cell is done, 1
    when one failed, 2 for mixed settings, 130 when interrupted."""
    command = shlex.join(["python", *sys.argv])
    # Seed-major: a slow patch of a shared machine then hits every framework, not one.
    pairs = [(fw, s) for s in seeds for fw in frameworks]
    for fw, s in pairs:
        p = case_dir / f"{fw}-s{s}.json"
        if p.exists():
            old = json.loads(p.read_text())
            theirs = {k: old.get(k) for k in settings}
            if theirs != settings:
                say(
                    f"error: {p} exists with {theirs} (asked: {settings}); use another "
                    "--results folder or delete it"
                )
                return 2
    say(f"{case}: {settings}; {len(pairs)} cells -> {case_dir}")
    failed: list[str] = []
    interrupted = False
    for i, (fw, seed) in enumerate(pairs, 1):
        out = case_dir / f"{fw}-s{seed}.json"
        tag = f"[{i}/{len(pairs)}] {case}/{fw}-s{seed}"
        if out.exists():
            say(f"{tag}: done before, skipped ({out})")
            continue
        run_dir = case_dir / "runs" / f"{fw}-s{seed}"
        if run_dir.exists():  # an unfinished earlier attempt: start the cell afresh
            shutil.rmtree(run_dir)
        cell = {
            "case": case,
            "framework": fw,
            "seed": seed,
            **settings,
            "out": str(out.resolve()),
            "run_dir": str(run_dir.resolve()),
            "command": command,
        }
        say(f"{tag}: training")
        t0 = time.perf_counter()
        try:
            rc = spawn_cell(script, cell, case_dir / "logs" / f"{fw}-s{seed}.log")
        except KeyboardInterrupt:
            say(f"{tag}: interrupted, not recorded; run the same command again to resume")
            interrupted = True
            break
        dt_s = time.perf_counter() - t0
        if rc == 0 and out.exists():
            say(f"{tag}: done in {dt_s:.0f} s")
        else:
            say(f"{tag}: FAILED (exit {rc}) after {dt_s:.0f} s; see {case_dir / 'logs'}")
            failed.append(f"{fw}-s{seed}")
    report = render(load_cells(case_dir, all_frameworks), command)
    case_dir.mkdir(parents=True, exist_ok=True)
    (case_dir / "report.md").write_text(report)
    say("")
    say(report)
    say(f"report: {case_dir / 'report.md'}")
    if failed:
        say(f"failed: {', '.join(failed)}")
    return 130 if interrupted else (1 if failed else 0)
