"""``actorq train ALGO``, and the one-line error every ``actorq`` command prints.

Shared by the top-level command (:mod:`actorq.cli.main`) and the world commands that train an
agent (``actorq graphopt train``): the CLIs dispatch downward, never back up.
"""

from __future__ import annotations

import sys

from actorq.cli.args import parse


def fail(msg: str, code: int = 2) -> int:
    """Print ``actorq: error: MSG`` on one line and return ``code`` (the exit status)."""
    # one line whatever the input held: a control character typed into a flag (a carriage
    # return in a path, found by the fuzz tests) is shown escaped, not printed
    msg = "".join(c if c.isprintable() else repr(c)[1:-1] for c in msg)
    print(f"actorq: error: {msg}", file=sys.stderr)
    return code


def cmd_train(algo: str, argv: list[str]) -> int:
    from actorq.agents import AGENTS, config_class

    if algo not in AGENTS:
        return fail(f"unknown algorithm {algo!r}; available: {', '.join(AGENTS)}")

    cfg = parse(config_class(algo), argv, f"actorq train {algo}")
    cfg.validate()
    from actorq.envs import validate_env_id

    validate_env_id(cfg.env)
    from actorq.experiment import train

    result = train(cfg)
    if result.interrupted:
        print(
            f"actorq: interrupted; checkpoint saved. Resume with: actorq train {algo} "
            f"--resume {result.run_dir}",
            file=sys.stderr,
        )
        return 130
    return 0
