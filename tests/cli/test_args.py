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
