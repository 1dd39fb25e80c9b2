"""Chip macro placement: circuit-training netlists, ``.plc`` placements and the proxy cost.

Follows Google's Circuit Training (Mirhoseini et al. 2021, "A graph placement methodology for fast
chip design", Nature 594) and its evaluator as documented by google-research/circuit_training and
reverse-engineered by TILOS-AI-Institute/MacroPlacement.
"""
