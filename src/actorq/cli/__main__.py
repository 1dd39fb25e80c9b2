"""``python -m actorq.cli ...``: the ``actorq`` command."""

from actorq.cli.main import entrypoint

entrypoint()
