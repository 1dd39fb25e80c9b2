"""The actor's side (:mod:`actorq.core.loop`): which seeds its environments get."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from actorq import DQNConfig
from actorq.agents import builder_for
from actorq.core.seeds import EVAL_SEED, FINAL_EVAL_SEED, confirm_seed
from actorq.envs import env_spec


def _eval_seeds(episodes: int = 100, confirmations: int = 400) -> np.ndarray:
    """Every env seed the periodic, final and first ``confirmations`` confirmation evaluations
    of ``episodes`` episodes play (each is also the seed of an evaluation's action generator)."""
    firsts = [EVAL_SEED, FINAL_EVAL_SEED] + [
        confirm_seed(k, episodes) for k in range(confirmations)
    ]
    return (np.asarray(firsts)[:, None] + np.arange(episodes)).ravel()


@pytest.mark.parametrize("envs", [1, 16, 999])
def test_no_actor_trains_on_an_evaluations_seeds(envs: int) -> None:
    cfg = DQNConfig(env="gym:CartPole-v1")
    setup = builder_for(cfg).actor_setup(cfg, env_spec(cfg.env))
    setup = dataclasses.replace(setup, envs_per_actor=envs, noise=[[0.0]] * 300)
    starts = []
    for base in range(51):
        one = dataclasses.replace(setup, seed=base)
        for inc in range(4):
            starts.append(one.actor_config(0, inc, in_process=True)["seed"])  # slot 0
            starts += [one.actor_config(i, inc)["seed"] for i in range(300)]  # slots 1..300
    seeds = (np.asarray(starts)[:, None] + np.arange(envs)).ravel()  # each actor's envs
    assert not np.isin(seeds, _eval_seeds()).any()
    # seeds clear of them are the rule's as ever (actor slots 1-9 of seed 0: 1000-9000)
    plain = dataclasses.replace(setup, seed=0)
    assert [plain.actor_config(i)["seed"] for i in range(9)] == [1000 * (i + 1) for i in range(9)]
    assert plain.actor_config(0, 1)["seed"] == 1000 + 7919
    assert dataclasses.replace(setup, seed=7).actor_config(0, in_process=True)["seed"] == 7
