"""Probe (2026-11-30, AMD EPYC): int8 agreement with fp32 of the Atari DQN Pong policy, seed 0,
at its 5.69M-frame checkpoint, for each --calibration rounding, and where the two disagree.

    python benchmarks/probes/dqn_agreement.py RUN_DIR   # a copy of runs/atari/dqn-pong-...-s0

Output (dqn_agreement.txt beside it)."""

import sys

import numpy as np

from actorq.agents import builder_for
from actorq.quant.runtimes import decode_snapshot, make_runtime
from actorq.run.directory import load_run_policy

rd = sys.argv[1]
cfg, io, _ = load_run_policy(rd, "int8")
builder = builder_for(cfg)
spec = builder.env_spec(cfg)
table = builder.table_config(cfg, spec).build(builder.data_specs(cfg, spec))
table.load(f"{rd}/checkpoint/replay.npz")
states = table.sample_states(4096, np.random.default_rng(123))
fp32 = io.snapshot(1, "fp32")
for cal in ("none", "auto", "gptq"):
    io.cfg.calibration = cal
    for v in (1, 2, 3):
        calib = table.sample_states(256, np.random.default_rng((cfg.seed, v)))
        agree = io.compare(io.snapshot(v, "int8", calib), fp32, states, 0).agreement
        print(cal, v, round(agree, 4), flush=True)
io.cfg.calibration = "none"
calib = table.sample_states(256, np.random.default_rng((cfg.seed, 1)))


def q_values(data: bytes) -> np.ndarray:
    rt = make_runtime(decode_snapshot(data))
    return np.concatenate([rt(states[i : i + 8]) for i in range(0, len(states), 8)])


q32, q8 = q_values(fp32), q_values(io.snapshot(1, "int8", calib))
a32, a8 = q32.argmax(1), q8.argmax(1)
move = np.array([0, 0, 2, 3, 2, 3])  # Pong: FIRE moves as NOOP, RIGHTFIRE as RIGHT, ...
print("agree", (a32 == a8).mean(), "same move", (move[a32] == move[a8]).mean())
gap = q32.max(1) - q32[np.arange(len(q32)), a8]
d = a32 != a8
print("disagreements", d.sum(), "fp32 Q given up: median", np.median(gap[d]),
      "p90", np.quantile(gap[d], 0.9), "max", gap[d].max())  # fmt: skip
top2 = np.sort(q32, 1)
print(
    "median |Q|",
    np.median(np.abs(q32.max(1))),
    "top-2 gap median",
    np.median(top2[:, -1] - top2[:, -2]),
)
