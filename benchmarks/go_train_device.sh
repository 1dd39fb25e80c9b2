#!/usr/bin/env bash
# GO training end to end with the learner on the GPU and on the CPU, on one graph: the same
# `actorq train go` run (P-precision actors, one actor process per core but one, two decisions
# each per update, --max-policy-lag 2) with --device cuda and then --device cpu, each stopped
# after T seconds (SIGINT: the run saves and writes its summary). Prints decisions learned from
# per second for each (steady: from the first to the last logged update) and where the time
# went (means over the logged intervals: the learner's share waiting for data and inside its
# update; the actors' busy share inside the policy runtime and the simulator), and copies each
# run's log, summary.json and metrics.csv to OUT (file names end in TAG, to keep several runs).
#
#   OUT=DIR bash benchmarks/go_train_device.sh          # on a GPU machine (16 cores: 15 actors)
#   G=graph A=actors T=seconds P=int8 DEVS="cuda cpu"    # the defaults: synthetic-80000-s0, 15,
#   TAG=-fp32 P=fp32 OUT=DIR bash ...                    # 110, int8; TAG empty
set -u
: "${OUT:?set OUT to a folder for the logs and summaries}"
G=${G:-synthetic-80000-s0}; A=${A:-15}; T=${T:-110}; P=${P:-int8}; TAG=${TAG:-}
for d in ${DEVS:-cuda cpu}; do
  rm -rf /tmp/e2e-$d
  timeout -s INT $T python3 -m actorq.cli train go --env graphopt:placement/$G --actors $A --envs-per-actor 2 --batch-graphs $((2*A)) --total-steps 1000000 --max-policy-lag 2 --precision $P --device $d --run-dir /tmp/e2e-$d --no-progress > $OUT/e2e-$d$TAG.log 2>&1
  echo "$d rc=$?"; cp /tmp/e2e-$d/summary.json $OUT/summary-$d$TAG.json; cp /tmp/e2e-$d/metrics.csv $OUT/metrics-$d$TAG.csv
done
TAG=$TAG python3 - <<'PY'
import csv, json, os
out, tag = os.environ["OUT"], os.environ["TAG"]
for d in os.environ.get("DEVS", "cuda cpu").split():
    s = json.load(open(f"{out}/summary-{d}{tag}.json"))
    rows = [r for r in csv.DictReader(open(f"{out}/metrics-{d}{tag}.csv"))]
    steps = sorted({(float(r["wall_time"]), int(r["step"])) for r in rows})
    (t0, s0), (t1, s1) = steps[0], steps[-1]
    def mean(name: str) -> str:
        v = [float(r["value"]) for r in rows if r["metric"] == name and float(r["wall_time"]) > t0]
        return f"{sum(v) / len(v):.2f}" if v else "-"
    print(f"{d}{tag}: {s['env_steps']} decisions, {s['updates']} updates in {s['wall_time_s']:.1f} s; "
          f"steady {s1 - s0} decisions in {t1 - t0:.1f} s = {(s1 - s0) / max(t1 - t0, 1e-9):.2f}/s; "
          f"learner wait {mean('perf/learner_wait_frac')} update {mean('perf/learner_update_frac')}; "
          f"actors wait {mean('perf/actor_wait_frac')} infer {mean('perf/actor_infer_frac')} "
          f"sim {mean('perf/actor_env_frac')}")
PY
