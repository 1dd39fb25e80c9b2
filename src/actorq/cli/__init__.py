"""The ``actorq`` command line: :mod:`~actorq.cli.main` dispatches to ``train``
(:mod:`~actorq.cli.train`), ``eval``/``export``, the world commands ``graphopt``
(:mod:`~actorq.cli.graphopt`) and ``chip`` (:mod:`~actorq.cli.chip`), and ``bench``/``report``
(:mod:`actorq.cli.bench`). It sits above everything it runs: nothing in the library imports it.
"""

from actorq.cli.main import entrypoint, main

__all__ = ["entrypoint", "main"]
