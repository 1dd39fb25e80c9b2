#!/usr/bin/env bash
# The checks that need a GPU, as one script for a short GPU lease (an H100/H200 machine, 16 CPU
# cores, Python 3.12 and CUDA PyTorch installed, no network), in the order that spends it best:
#   1. limit:  learner_limit.py --device cuda (each update alone, then inside train() beside 15
#      actors), resuming benchmarks/results/learner_limit/<GPU>.json: copy OUT/learner_limit.json
#      back over it;
#   2. tests:  tests/test_cuda.py (PYTEST_K=EXPR: only those);
#   3. quarl:  specs/quarl_dqn_gpu.toml with 15 CPU actors into results/quarl_dqn_gpu_<gpu>_fast,
#      resumable by cell: unpack OUT/bench.tgz at the root, append OUT/power.csv (nvidia-smi's
#      samples) to its power.csv, then `actorq report` and gpu_energy.py it;
#   4. d4pg:   specs/quarl_d4pg_gpu.toml the same way (D4PG_SECONDS, default QUARL_SECONDS).
#
#   bash benchmarks/gpu_checks.sh --wheels              # here, first: .whl/ for `carry`
#   bash benchmarks/gpu_checks.sh OUT [QUARL_SECONDS]   # there, with carry [".whl"]
#
# STEPS="limit tests quarl" (the default; add d4pg) picks steps; each has its own time limit,
# cut to what is left of GPU_BUDGET_S (default 540: under the device tool's 600 s per call, with
# room to pack). Results: OUT/learner_limit.{json,md}, limit.txt, pytest.txt, bench.tgz,
# power.csv, machine.txt, steps.txt. bench.tgz is rewritten after each step (a call cut short
# still brings back what finished), and holds each cell's files but its checkpoints, best policy,
# TensorBoard and actor logs (a 3x2048 checkpoint is ~100 MB: the tool returns 16 MiB a file).
# The cells run in /tmp/actorq-gpu/<results>, seeded from the committed results: a second call
# on the same warm machine resumes there (the tool's copy of the tree removes files git does not
# know, so results left in the tree by an earlier call are gone).
set -u
# --wheels: what the image lacks, for `carry`: gymnasium and tyro wheels with their needs, and
# MuJoCo's cp312 wheel with dm-control cut to the suite (its wheel is 56 MB; cut: 3 MB).
# dm-control and MuJoCo are Apache-2.0. Writes .whl/ (ignored by git; ~35 MB).
if [[ ${1:-} == --wheels ]]; then
  set -e
  py=${PYTHON:-.venv/bin/python}
  dl() {
    "$py" -m pip download -q -d .whl --only-binary :all: --python-version 3.12 --no-deps \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 "$@" 2>&1 | grep -v "WARNING: Location" || true
  }
  mkdir -p .whl/site
  dl gymnasium tyro farama-notifications cloudpickle docstring-parser typeguard shtab \
    typing-extensions
  dl mujoco==3.17.0 dm-env dm-tree glfw pyopengl dm-control==1.0.50
  tmp=$(mktemp -d)
  (cd "$tmp" && unzip -q "$OLDPWD"/.whl/dm_control-1.0.50-py3-none-any.whl)
  rm -rf "$tmp"/dm_control/locomotion "$tmp"/dm_control/suite/dog_assets \
    "$tmp"/dm_control/mujoco/testing "$tmp"/dm_control/blender "$tmp"/dm_control/suite/all_domains.png
  find "$tmp"/dm_control -name "*_test.py" -delete
  rm -rf .whl/site/dm_control && mv "$tmp"/dm_control .whl/site/ && rm -rf "$tmp"
  rm -f .whl/dm_control-*.whl
  du -sh .whl
  exit 0
fi
out=${1:?usage: gpu_checks.sh OUT [QUARL_SECONDS]}
quarl_s=${2:-100}
steps=" ${STEPS:-limit tests quarl} "
mkdir -p "$out"
deadline=$(($(date +%s) + ${GPU_BUDGET_S:-540}))
left() {  # left WANT: WANT seconds, or what is left before the deadline (30 s kept to pack)
  local rest=$((deadline - $(date +%s) - 30))
  ((rest < $1)) && echo $((rest > 1 ? rest : 1)) || echo "$1"
}
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
[[ -d .whl/site ]] && export PYTHONPATH="$PWD/.whl/site${PYTHONPATH:+:$PYTHONPATH}"  # dm-control, cut
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv
  nproc; lscpu | grep -m1 'Model name'
  python3 -c "import sys, torch, onnxruntime; print(sys.version.split()[0], torch.__version__, onnxruntime.__version__)"
} >"$out/machine.txt" 2>&1
mark() { echo "$(date +%s.%N) $*" >>"$out/steps.txt"; }
# TZ=UTC: nvidia-smi writes local time, gpu_energy.py reads UTC
TZ=UTC nvidia-smi --query-gpu=timestamp,power.draw,utilization.gpu --format=csv,nounits -lms 500 \
  >"$out/power.csv" 2>/dev/null &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT

# 1. the learner's limit on this GPU, and the learner inside train() beside 15 actors
if [[ $steps == *" limit "* ]]; then
  mark limit-start
  # resumes the committed table of this GPU kind: rows already measured are kept
  mkdir -p "$out/ll"
  name=$(python3 -c "import re, torch; print(re.sub(r'[^A-Za-z0-9._-]+', '_', torch.cuda.get_device_name()).strip('_'))")
  cp "benchmarks/results/learner_limit/$name.json" "$out/ll/" 2>/dev/null
  timeout "$(left 270)" python3 benchmarks/learner_limit.py --device cuda --seconds 0.6 \
    --compile-rows dqn:3x2048:128 --system-seconds 12 --system-warmup 6 --actors 15 \
    --system dqn:3x2048:128:fast+eager-host dqn:256x256:128:fast d4pg:256x256:128:fast \
      ppo:64x64:256:fast \
    --out "$out/ll" >"$out/limit.txt" 2>&1
  echo "learner_limit exit $?" >>"$out/limit.txt"
  mark limit-end
  cp "$out"/ll/*.json "$out/learner_limit.json" 2>/dev/null
  cp "$out"/ll/*.md "$out/learner_limit.md" 2>/dev/null
  rm -rf "$out/ll"
  grep -v "^│\|^┃\|^┏\|^┗\|^┡\|^└\|^├" "$out/limit.txt" | tail -40
fi

# 2. the CUDA tests (four workers of four threads: the learning tests run side by side)
if [[ $steps == *" tests "* ]]; then
  mark tests-start
  OMP_NUM_THREADS=4 timeout "$(left 170)" python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_cuda.py \
    ${PYTEST_K:+-k "$PYTEST_K"} >"$out/pytest.txt" 2>&1
  echo "pytest exit $?" >>"$out/pytest.txt"
  mark tests-end
  tail -25 "$out/pytest.txt"
fi

pack() {  # every cell's own files from /tmp/actorq-gpu into OUT/bench.tgz
  [[ -d /tmp/actorq-gpu ]] || return 0
  tar czf "$out/bench.tgz.part" -C /tmp/actorq-gpu --exclude=checkpoint --exclude=checkpoint.old \
    --exclude=best --exclude=tb --exclude=actors --exclude="*.tmp" . &&
    mv "$out/bench.tgz.part" "$out/bench.tgz"
}

quarl() {  # spec seconds: QuaRL cells into the committed results of this GPU kind
  local spec=$1 secs gpu name results
  secs=$(left "$2")
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
  name=$(basename "$spec" .toml)_${gpu}_fast
  results=/tmp/actorq-gpu/benchmarks/results/$name
  if [[ ! -d $results ]]; then
    mkdir -p "$results"
    [[ -d benchmarks/results/$name ]] && cp -r "benchmarks/results/$name/." "$results/"
  fi
  timeout -s INT "$secs" python3 -m actorq.cli bench "$spec" --results "$results" \
    --override device=cuda --override actors=15 --no-progress >"$out/quarl.txt" 2>&1
  echo "bench exit $?" >>"$out/quarl.txt"
  grep -v "^│\|^┃\|^┏\|^┗\|^┡\|^└\|^├" "$out/quarl.txt" | tail -15
  cat "$out/quarl.txt" >>"$results/bench_log.txt" && rm -f "$out/quarl.txt"
  pack
}

# 3. the QuaRL DQN cells with the fast learner (resumable: a later window goes on)
if [[ $steps == *" quarl "* ]]; then
  mark quarl-start
  quarl benchmarks/specs/quarl_dqn_gpu.toml "$quarl_s"
  mark quarl-end
fi

# 4. QuaRL's D4PG rows (needs MuJoCo and dm-control: --wheels, carry .whl)
if [[ $steps == *" d4pg "* ]]; then
  mark d4pg-start
  quarl benchmarks/specs/quarl_d4pg_gpu.toml "${D4PG_SECONDS:-$quarl_s}"
  mark d4pg-end
fi
kill "$smi" 2>/dev/null
ls -la "$out"
