"""Spec texts the bench tests share."""

SMALL = """
precisions = ["fp32", "int8"]
seeds = [0, 1]
[defaults]
actors = 0
[[tasks]]
agent = "dqn"
env = "gym:CartPole-v1"
label = "cartpole"
widths = ["32,32"]
"""
