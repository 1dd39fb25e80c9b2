"""``actorq.cli.args``: how tyro's help and errors reach the user."""

from __future__ import annotations

import contextlib
import io

import pytest
import tyro

from actorq.cli import main
from actorq.cli.args import join_paragraph_lines


def test_a_docstring_paragraph_is_one_help_paragraph() -> None:
    text = (
        "Budget of\n    env steps.\n\n    Second (a paragraph)\n    - one item\n      goes on\n"
        "    - two"
    )
    assert join_paragraph_lines(text) == (
        "Budget of env steps.\n\nSecond (a paragraph)\n- one item goes on\n- two"
    )


def test_help_lines_break_where_the_terminal_ends_not_where_the_source_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: a line break is the docstring's own
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        main(["train", "ppo", "--help"])
    assert e.value.code == 0
    # three docstrings broken across source lines, one of them before a "(" tyro breaks at
    for words in ("before the loop looks at the actors again", "PPO's do; else those",
                  "codecarbon's offline tracker (whole machine"):  # fmt: skip
        assert any(words in line for line in out.getvalue().splitlines()), words
    # tyro's own helper is back after the parse
    assert tyro._strings.remove_single_line_breaks is not join_paragraph_lines


@pytest.mark.parametrize("columns", ["40", "60", "200"])
def test_an_invalid_choice_is_one_whole_line_whatever_the_terminal_width(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """tyro wraps its message at the terminal's width and lists choices in a set's order: the
    one line keeps all of it, the choices sorted, without tyro's 'None' for an unset option."""
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["eval", "run", "--precision", "auto"]) == 2
    assert main(["export", "run", "--which", "worst"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [
        "actorq: error: invalid choice 'auto' for argument '--precision'. expected one of "
        "fp16, fp32, int4, int8. (see actorq eval --help)",
        "actorq: error: invalid choice 'worst' for argument '--which'. expected one of best, "
        "latest. (see actorq export --help)",
    ]


def _train_config(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[int, object, str]:
    """``actorq train ARGV``'s exit status, the config it would train (None if refused) and
    its stderr, without a run."""
    import actorq.experiment

    seen: list[object] = []

    def fake_train(cfg: object, **_: object) -> object:
        seen.append(cfg)
        return type("R", (), {"interrupted": False})()

    monkeypatch.setattr(actorq.experiment, "train", fake_train)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["train", *argv])
    return code, seen[0] if seen else None, err.getvalue()


@pytest.mark.parametrize(
    ("value", "steps"), [("1e5", 100_000), ("2.5e5", 250_000), ("1000.0", 1000), ("1E6", 10**6)]
)
def test_an_int_flag_takes_a_whole_number_in_scientific_notation(
    value: str, steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SB3 and CleanRL users write ``--total-steps 1e5``: the int it names, as an int."""
    code, cfg, err = _train_config(monkeypatch, ["dqn", "--total-steps", value, "--actors", "2e0"])
    assert code == 0, err
    assert cfg.total_steps == steps and type(cfg.total_steps) is int  # type: ignore[attr-defined]
    assert cfg.actors == 2 and type(cfg.actors) is int  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--total-steps", "1.5e0"], "--total-steps: '1.5e0' is not a whole number"),
        (["--total-steps", "1e-3"], "--total-steps: '1e-3' is not a whole number"),
        (["--total-steps", "inf"], "--total-steps: 'inf' is not a finite number"),
        (["--seed", "nan"], "--seed: 'nan' is not a finite number"),
        (["--total-steps", "1e400"], "--total-steps: '1e400' is not a finite number"),
        (["--actors", "1e9"], "--actors must be in [0, 100000], got 1000000000"),
        (["--seed", "-1e3"], "--seed must be in [0, 4294967295], got -1000"),
        (["--total-steps", "abc"], "invalid literal for int()"),
    ],
)
def test_an_int_flag_refuses_a_number_that_is_not_a_whole_one_in_range(
    argv: list[str], needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, cfg, err = _train_config(monkeypatch, ["dqn", *argv])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and cfg is None
    assert len(lines) == 1 and lines[0].startswith("actorq: error:") and needle in lines[0], lines


def test_every_commands_int_flags_take_scientific_notation() -> None:
    """One rule for every command (eval's --episodes is no config field): 2e1 is 20, 2.5 is
    refused before the run directory is read."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["eval", "/nonexistent-run", "--episodes", "2.5"]) == 2
    assert "--episodes: '2.5' is not a whole number" in err.getvalue()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["eval", "/nonexistent-run", "--episodes", "2e1"]) == 2
    assert "not a whole number" not in err.getvalue() and "/nonexistent-run" in err.getvalue()
