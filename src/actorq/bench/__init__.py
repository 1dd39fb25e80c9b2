"""Benchmark matrices (``actorq bench``) and their reports (``actorq report``).

A TOML spec names tasks and axes (agent × env × precision × seed × policy width); every cell is one
``actorq.train`` run in a fresh process, into one results directory; the report aggregates seeds
with rliable's IQM and stratified bootstrap CIs (Agarwal et al., NeurIPS 2021) into QuaRL's table
(Lam et al., TMLR 2022): speedup to target vs fp32, return, energy and CO2 ratios.
"""

from actorq.bench.spec import Cell, Spec, SpecError, load_spec

__all__ = ["Cell", "Spec", "SpecError", "load_spec"]
