"""What every MLP agent's builder checks before a new run (:mod:`actorq.agents.builder`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorq.agents import config_class
from actorq.cli import main


@pytest.mark.parametrize(
    ("agent", "env", "widths"),
    [("dqn", "gym:CartPole-v1", ["--hidden", "64"]),
     ("ppo", "gym:CartPole-v1", ["--policy-hidden-sizes", "64"]),
     ("d4pg", "gym:Pendulum-v1", ["--policy-hidden-sizes", "32"])],
)  # fmt: skip
@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_a_quantized_run_with_one_hidden_layer_is_refused_before_it_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], agent: str, env: str,
    widths: list[str], precision: str,
) -> None:  # fmt: skip
    """int8 and int4 MLP snapshots keep the first and last layers fp32 (QuaRL's deployment):
    one hidden layer leaves nothing to quantize, and the run, its summary and its energy
    would be labelled int8 while its actors ran fp32."""
    run = tmp_path / "run"
    argv = ["train", agent, "--env", env, "--precision", precision, *widths, "--actors", "0",
            "--total-steps", "200", "--run-dir", str(run), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"nothing would be {precision}" in err, err
    assert f"{widths[0]} {widths[1]} is one hidden layer" in err
    assert not run.exists()


def test_precisions_that_round_every_layer_or_choose_keep_one_hidden_layer() -> None:
    """fp16 stores every layer in half precision; auto measures (and keeps fp32 on a tie):
    neither is refused."""
    from actorq.agents import builder_for

    for precision in ("fp32", "fp16", "auto"):
        cfg = config_class("dqn")(env="gym:CartPole-v1", hidden=(64,), precision=precision)
        builder = builder_for(cfg)
        builder.check_new_run(cfg, builder.env_spec(cfg))
