#!/usr/bin/env bash
# GO training end to end with the learner on the GPU and on the CPU, on one graph: the same
# `actorq train go` run (int8 actors, one actor process per core but one, two decisions each
# per update, --max-policy-lag 2) with --device cuda and then --device cpu, each stopped after
# T seconds (SIGINT: the run saves and writes its summary). Prints decisions learned from per
# second for each (steady: from the first to the last logged update), and copies each run's
# log, summary.json and metrics.csv to OUT.
#
#   OUT=DIR bash benchmarks/go_train_device.sh          # on a GPU machine (16 cores: 15 actors)
#   G=graph A=actors T=seconds DEVS="cuda cpu"           # the defaults: synthetic-80000-s0, 15, 110
set -u
: "${OUT:?set OUT to a folder for the logs and summaries}"
G=${G:-synthetic-80000-s0}; A=${A:-15}; T=${T:-110}
for d in ${DEVS:-cuda cpu}; do
  rm -rf /tmp/e2e-$d
  timeout -s INT $T python3 -m actorq.cli train go --env graphopt:placement/$G --actors $A --envs-per-actor 2 --batch-graphs $((2*A)) --total-steps 1000000 --max-policy-lag 2 --device $d --run-dir /tmp/e2e-$d --no-progress > $OUT/e2e-$d.log 2>&1
  echo "$d rc=$?"; cp /tmp/e2e-$d/summary.json $OUT/summary-$d.json; cp /tmp/e2e-$d/metrics.csv $OUT/metrics-$d.csv
done
python3 - <<'PY'
import csv, json, os
out = os.environ["OUT"]
for d in os.environ.get("DEVS", "cuda cpu").split():
    s = json.load(open(f"{out}/summary-{d}.json"))
    rows = [r for r in csv.DictReader(open(f"{out}/metrics-{d}.csv"))]
    steps = sorted({(float(r["wall_time"]), int(r["step"])) for r in rows})
    (t0, s0), (t1, s1) = steps[0], steps[-1]
    print(f"{d}: {s['env_steps']} decisions, {s['updates']} updates in {s['wall_time_s']:.1f} s; "
          f"steady {s1 - s0} decisions in {t1 - t0:.1f} s = {(s1 - s0) / max(t1 - t0, 1e-9):.2f}/s")
PY
