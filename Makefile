# `make run` and `make test` work on a fresh machine: they create .venv, install torch==2.13.0
# first (the CPU wheel; any other spec pulls several GB of CUDA packages), then the project.
# Where pip's index serves CUDA's build for that spec (PyPI on Linux), TORCH_PIP='--index-url
# https://download.pytorch.org/whl/cpu' takes PyTorch's CPU wheel instead.
# `make run` installs only what the main job needs; `make test` adds the extras the tests use.
PY ?= python3
TORCH_PIP ?=
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
WORKERS = $(shell $(PY) -c 'import os; f = getattr(os, "sched_getaffinity", None); print(min(4, len(f(0)) if f else os.cpu_count() or 1))' 2>/dev/null || echo 1)

.PHONY: run test test-cluster lint format typecheck bench clean

# The Makefile is a prerequisite too: its torch pin and extras lists are part of what is installed.
# A venv left without pip (ensurepip missing on the first try) is made again, not reused (pip's
# presence asked by an import: `pip --version` also fails on a bad pip.conf, which a new venv
# would not mend).
$(RUN_STAMP): pyproject.toml Makefile
	$(BIN)/python -c 'import pip' >/dev/null 2>&1 || { rm -rf $(VENV); $(PY) -m venv $(VENV); }
	$(BIN)/python -m pip install -q torch==2.13.0 $(TORCH_PIP)
	$(BIN)/python -m pip install -q -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,control,graph,distributed,bench,hf,atari]'
	touch $(STAMP)

# The main job: DQN with int8 actors on CartPole-v1, embedded local backend (no services).
run: $(RUN_STAMP)
	$(BIN)/actorq train dqn --env gym:CartPole-v1 --precision int8 --actors 2

# Every CPU this process may use (pytest-xdist; at most 4 workers): the suite is one core's work
# otherwise. Counted from the affinity mask (a container's cpuset; not a `docker --cpus`
# quota), not xdist's `auto` (physical cores: one worker on a 2-vCPU VM of 1 core x 2
# threads). The Ray tests share one worker (xdist_group "ray"), one Ray cluster at a time. The
# 15 slowest tests are listed at the end (the suite's budget is 15 minutes with its set-up).
test: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -m "not slow" -n $(WORKERS) --dist loadgroup --durations=15

# A real Ray cluster as users start one (ray start, token auth, two raylets): ~1-3 minutes.
test-cluster: $(STAMP)
	$(BIN)/python -m pytest -q -m cluster tests/distributed/test_ray_start.py

lint: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/actor_throughput.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
