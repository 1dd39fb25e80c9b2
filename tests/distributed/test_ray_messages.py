"""What the Ray backend's processes send each other, without a cluster: only bytes, str and
plain numbers (which Ray carries without pickle). The remote classes run here as plain objects,
their handles and object references stood in for."""

from __future__ import annotations

import inspect
import json
import typing
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from actorq.distributed import ray_actors, wire  # noqa: E402

REMOTE = [
    ray_actors.NodeCache,
    ray_actors.RelayCache,
    ray_actors.ParameterServer,
    ray_actors.ReplayShard,
    ray_actors.RayActorWorker,
]
SAFE = {bytes, str, int, float, bool, type(None)}
RAYS_OWN = {"refs", "children"}  # object references and actor handles: Ray's business


def _pickled(value: Any) -> bool:
    """Whether Ray's serializer would pickle ``value`` (its msgpack falls back to pickle)."""
    from ray._raylet import MessagePackSerializer

    fallback: list[Any] = []
    MessagePackSerializer.dumps(value, lambda o: fallback.append(o) or len(fallback) - 1)
    return bool(fallback)


def test_remote_methods_take_and_return_only_types_ray_sends_without_pickle() -> None:
    """Every method callable through a handle, its arguments and its result (mypy holds the
    bodies to these hints: a numpy scalar returned as ``int`` is an error there)."""
    assert _pickled((1, b"x")) and not _pickled(b"x") and not _pickled(3)  # the premise
    bad = []
    for cls in REMOTE:
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_") and name != "__init__":
                continue  # not callable through a handle
            for arg, hint in typing.get_type_hints(fn).items():
                if arg not in RAYS_OWN and hint not in SAFE:
                    bad.append(f"{cls.__name__}.{name}: {arg}: {hint}")
    assert not bad


def test_the_parameter_server_serves_bytes_the_actor_decodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = ray_actors.ParameterServer()

    class _Call:
        def __init__(self, fn: Any) -> None:
            self.remote = fn

    handle = type("H", (), {})()
    handle.fetch = _Call(server.fetch)  # type: ignore[attr-defined]
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: getattr(ref, "data", ref))
    monkeypatch.setattr(ray_actors, "node_id", lambda: "node")
    source = ray_actors.RemoteSource(handle)
    assert source.fetch() is None  # nothing published yet
    _publish(server, 7, b"snapshot-7")
    reply = server.fetch()
    assert isinstance(reply, bytes) and not _pickled(reply)
    assert source.fetch() == (7, b"snapshot-7")
    assert json.loads(server.info())["bytes_served"] == 2 * len(b"snapshot-7")
    with pytest.raises(ValueError, match="no version"):
        wire.decode_versioned(b"1234")


def _publish(server: Any, version: int, data: bytes) -> None:
    """``server.publish(version, [ref])`` with ``ref`` standing for ``data``."""
    import asyncio

    out = server.publish(version, [_Ref(data)])
    if inspect.isawaitable(out):
        asyncio.run(_resolve(out))


class _Ref:
    """An object reference's stand-in: awaited (an async actor) or read by ``ray.get``."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __await__(self) -> typing.Generator[Any, None, bytes]:
        return self.data
        yield  # a generator: awaitable


async def _resolve(aw: Any) -> Any:
    return await aw
