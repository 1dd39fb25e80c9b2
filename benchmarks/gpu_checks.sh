#!/usr/bin/env bash
# The checks that need a GPU, as one script for a short GPU lease (an H100/H200 machine with 16
# CPU cores, Python 3.12 and a CUDA PyTorch already installed, no network):
#   1. tests/test_cuda.py: every agent's learner on CUDA (learning, snapshots byte-identical to
#      a CPU learner's, CUDA updates == CPU updates, a GPU-trained run read back without a GPU);
#   2. QuaRL's DQN rows with the learner on the GPU and 15 CPU actors
#      (benchmarks/specs/quarl_dqn_gpu.toml, resumable cells), the GPU's power sampled by
#      nvidia-smi every 0.5 s beside it (the only energy counter measured there: CPU energy has
#      no counter on that machine);
#   3. benchmarks/publish_async.py --device cuda: what publishing costs a GPU learner, in line
#      and in the background (OUT/publish_async.md);
#   4. benchmarks/go_learner_device.py: one GO learner update on the machine's CPU and on the
#      GPU, graphs of 1k, 10k and 80k ops (OUT/go_learner/go_learner_device.md).
#
#   bash benchmarks/gpu_checks.sh OUT [BENCH_SECONDS]
#
# PYTEST_K=EXPR runs only the CUDA tests that match (pytest -k), e.g. on a second try.
# STEPS="tests publish bench go" (the default: all four) runs only the steps named.
# Not here (four more minutes): benchmarks/go_train_device.sh, GO's training end to end with its
# learner on the GPU and on the CPU beside 15 actors.
# Pure-Python packages the image lacks (gymnasium, tyro and their needs) are installed from
# wheels in .whl/ if present (pip download them for cp312 beforehand). Results: OUT/pytest.txt,
# OUT/bench.tgz (the results directory; `actorq report` it elsewhere), OUT/power.csv,
# OUT/machine.txt.
set -u
out=${1:?usage: gpu_checks.sh OUT [BENCH_SECONDS]}
bench_s=${2:-300}
steps=" ${STEPS:-tests publish bench go} "
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv
  nproc; python3 -c "import torch, onnxruntime; print(torch.__version__, onnxruntime.__version__)"
} >"$out/machine.txt" 2>&1

# 1. the CUDA tests (four workers of four threads: the learning tests run side by side)
if [[ $steps == *" tests "* ]]; then
  OMP_NUM_THREADS=4 timeout 240 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_cuda.py \
    ${PYTEST_K:+-k "$PYTEST_K"} >"$out/pytest.txt" 2>&1
  echo "pytest exit $?" >>"$out/pytest.txt"
  tail -30 "$out/pytest.txt"
fi

# 4 next (two minutes): GO's learner on the CPU and on the GPU
if [[ $steps == *" go "* ]]; then
  timeout 300 python3 benchmarks/go_learner_device.py --devices cpu cuda --updates 3 \
    --out "$out/go_learner" >"$out/go_learner.txt" 2>&1
  echo "go_learner_device exit $?" >>"$out/go_learner.txt"
  tail -16 "$out/go_learner.txt"
fi

# 3 (a minute): the publish cost of a GPU learner, in line and in the background
if [[ $steps == *" publish "* ]]; then
  timeout 120 python3 benchmarks/publish_async.py --device cuda --updates 300 --publish-every 50 \
    --out "$out" >"$out/publish_async.txt" 2>&1
  tail -8 "$out/publish_async.txt"
fi

# 2. the QuaRL DQN cells, with the GPU's power beside them
[[ $steps == *" bench "* ]] || { ls -la "$out"; exit 0; }
nvidia-smi --query-gpu=timestamp,power.draw,utilization.gpu --format=csv,nounits -lms 500 \
  >"$out/power.csv" 2>/dev/null &
smi=$!
results=runs/bench-quarl_dqn_gpu
timeout -s INT "$bench_s" python3 -m actorq.cli bench benchmarks/specs/quarl_dqn_gpu.toml \
  --results "$results" --override device=cuda --override actors=15 --no-progress
echo "bench exit $?"
kill "$smi" 2>/dev/null
tar czf "$out/bench.tgz" --exclude='*.safetensors' --exclude='replay*' "$results"
ls -la "$out"
