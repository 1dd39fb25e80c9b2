#!/usr/bin/env bash
# Before/after a change in one session: the same bench spec run by two commits of actorq,
# alternating seed by seed (before s0, after s0, before s1, ...) so that a busy spell of a
# shared machine hits both sides alike. The before side runs from a git worktree of BEFORE
# with this checkout's .venv (its dependencies must match); the after side is this checkout.
#
#   bash benchmarks/ab_commits.sh SPEC BEFORE_COMMIT RESULTS
#   .venv/bin/actorq report RESULTS/before; .venv/bin/actorq report RESULTS/after
set -eu
spec=${1:?usage: ab_commits.sh SPEC BEFORE_COMMIT RESULTS}
before=${2:?usage: ab_commits.sh SPEC BEFORE_COMMIT RESULTS}
results=${3:?usage: ab_commits.sh SPEC BEFORE_COMMIT RESULTS}
py=${PYTHON:-.venv/bin/python}
tree=$(mktemp -d)/before
git worktree add --detach "$tree" "$before" >/dev/null
trap 'git worktree remove --force "$tree"' EXIT
seeds=$("$py" -c "import sys, tomllib
print(*tomllib.load(open(sys.argv[1], 'rb'))['seeds'])" "$spec")
one=$(dirname "$tree")/spec.toml
for s in $seeds; do
  # the spec with its top-level seed list cut to this seed (cells are named by seed, so each
  # side's results directory collects them all)
  sed "s/^seeds = \[.*\]/seeds = [$s]/" "$spec" >"$one"
  for side in before after; do
    src=$PWD/src
    [[ $side == before ]] && src=$tree/src
    echo "== $side seed $s ($(date -u +%H:%M:%S))"
    PYTHONPATH=$src "$py" -m actorq.cli bench "$one" --results "$results/$side" --no-progress
  done
done
