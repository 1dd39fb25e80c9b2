"""Chip macro placement: circuit-training netlists, ``.plc`` placements and the proxy cost.

Follows Google's Circuit Training (Mirhoseini et al. 2021, "A graph placement methodology for fast
chip design", Nature 594) and its evaluator as documented by google-research/circuit_training and
reverse-engineered by TILOS-AI-Institute/MacroPlacement.

Modules: :mod:`~actorq.chip.netlist` (netlists), :mod:`~actorq.chip.plc` (``.plc`` files),
:mod:`~actorq.chip.cost` (the proxy cost, incremental), :mod:`~actorq.chip.force`
(force-directed soft-macro placement), :mod:`~actorq.chip.anneal` (random legal placement,
legalization, simulated annealing), :mod:`~actorq.chip.env` (the Gymnasium environment,
``make_env("chip:ariane133")``), :mod:`~actorq.cli.chip` (``actorq chip``). See docs/chip.md.
"""
