#!/usr/bin/env bash
# What a GPU machine's image lacks, gathered here for `carry` (it has no network): pure-Python
# wheels of gymnasium and tyro with their needs, and, for D4PG on the DeepMind Control Suite,
# MuJoCo's cp312 wheel with dm-control's needs and dm-control itself cut to what the suite
# uses (its wheel is 56 MB, over what a call may carry with the tree; the cut drops the
# locomotion and dog assets and the tests: 3 MB). dm-control and MuJoCo are Apache-2.0.
#
#   bash benchmarks/gpu_wheels.sh        # writes .whl/ (ignored by git; ~35 MB)
#
# benchmarks/gpu_checks.sh installs .whl/*.whl and puts .whl/site on PYTHONPATH.
set -eu
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
