"""What the Ray backend's processes send each other, without a cluster: only bytes, str and
plain numbers (which Ray carries without pickle). The remote classes run here as plain objects,
their handles and object references stood in for."""

from __future__ import annotations

import asyncio
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
    handle = type("H", (), {"fetch": type("F", (), {"remote": staticmethod(_sync(server.fetch))})})
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: getattr(ref, "data", ref))
    monkeypatch.setattr(ray_actors, "node_id", lambda: "node")
    source = ray_actors.RemoteSource(handle)
    assert source.fetch() is None  # nothing published yet
    _sync(server.publish)(7, [_Ref(b"snapshot-7")])
    reply = _sync(server.fetch)()
    assert isinstance(reply, bytes) and not _pickled(reply)
    assert source.fetch() == (7, b"snapshot-7")
    assert json.loads(server.info())["bytes_served"] == 2 * len(b"snapshot-7")
    with pytest.raises(ValueError, match="no version"):
        wire.decode_versioned(b"1234")


def _sync(fn: Any) -> Any:
    """``fn`` called as Ray calls an actor's method: run to its end if it is a coroutine."""

    def call(*args: Any) -> Any:
        out = fn(*args)
        return asyncio.run(_resolve(out))

    return call


async def _resolve(out: Any) -> Any:
    """What a method returned, awaited if it is a coroutine (an async actor's)."""
    return await out if inspect.isawaitable(out) else out


class _Ref:
    """An object reference's stand-in, as an async actor awaits one; ``gate`` holds it back
    (a pull under way). Every pull is counted in ``pulled``."""

    def __init__(self, data: bytes, pulled: list[bytes] | None = None, gate: Any = None) -> None:
        self.data, self.pulled, self.gate = data, pulled, gate

    def pull(self) -> bytes:
        """``ray.get``: a synchronous actor's pull."""
        if self.pulled is not None:
            self.pulled.append(self.data)
        return self.data

    def __await__(self) -> typing.Generator[Any, None, bytes]:
        data = self.pull()
        if self.gate is not None:
            yield from self.gate.__await__()
        return data


class _Child:
    """A relay's child: records the versions it is offered."""

    def __init__(self) -> None:
        self.got: list[int] = []
        self.publish = type("P", (), {"remote": staticmethod(lambda v, refs: self.got.append(v))})


@pytest.mark.parametrize("kind", ["node", "relay", "server"])
def test_publishes_to_a_busy_cache_pull_only_the_newest_next(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Versions 2..9 published while a cache pulls version 1: it pulls 9 next and skips the
    rest (it pulled all eight in turn, each pinned until then), and ends on the last."""
    import uuid

    monkeypatch.setattr(ray_actors, "node_id", lambda: "node")
    monkeypatch.setattr(ray, "put", lambda data: data)  # a relay's copy for its children
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: ref.pull())
    child = _Child()
    name = f"actorq-test-{uuid.uuid4().hex[:8]}"
    cache: Any = {
        "node": lambda: ray_actors.NodeCache(name, 64),
        "relay": lambda: ray_actors.RelayCache([child]),
        "server": ray_actors.ParameterServer,
    }[kind]()
    pulled: list[bytes] = []

    async def go() -> None:
        gate = asyncio.get_running_loop().create_future()
        first = asyncio.ensure_future(_resolve(cache.publish(1, [_Ref(b"v1", pulled, gate)])))
        await asyncio.sleep(0)  # version 1's pull is under way
        for v in range(2, 10):
            await _resolve(cache.publish(v, [_Ref(b"v%d" % v, pulled)]))  # the cache is busy
        assert pulled == [b"v1"]
        gate.set_result(None)
        await first

    try:
        asyncio.run(go())
        assert pulled == [b"v1", b"v9"]
        if kind == "node":
            from actorq.distributed.shm import SharedSnapshotCache

            assert SharedSnapshotCache(name).fetch() == (9, b"v9")
            assert json.loads(cache.info())["pulls"] == 2
        elif kind == "relay":
            assert child.got == [1, 9] and json.loads(cache.info())["version"] == 9
        else:
            assert wire.decode_versioned(asyncio.run(cache.fetch())) == (9, b"v9")
    finally:
        if kind == "node":
            cache.close()


def test_an_older_version_offered_during_a_pull_is_never_kept_after_it() -> None:
    """Async actors keep no order: v4's message came while v5 was pulled. Compared only with
    the version kept and the one waiting, v4 was queued, kept after v5, and the cache went
    back to version 4."""
    kept: list[int] = []
    pull = ray_actors.NewestPull(lambda v, data: kept.append(v))

    async def go() -> None:
        gate = asyncio.get_running_loop().create_future()
        five = asyncio.ensure_future(pull.offer(5, _Ref(b"v5", None, gate)))
        await asyncio.sleep(0)  # version 5's pull is under way
        await pull.offer(4, _Ref(b"v4"))
        gate.set_result(None)
        await five

    asyncio.run(go())
    assert kept == [5] and pull.latest == 5


class _Reply:
    """An object reference to a drain's reply; a ``lost`` one never arrives in time."""

    def __init__(self, value: str, lost: bool) -> None:
        self.value, self.lost = value, lost


class _Timeout(Exception):
    pass


class _DrainRay:
    """Ray as ``RayBackend._poll`` uses it; the next ``lose`` replies time out."""

    exceptions = type("E", (), {"RayError": Exception, "GetTimeoutError": _Timeout})

    def __init__(self) -> None:
        self.lose = 0

    def wait(self, refs: list[_Reply], num_returns: int, timeout: float) -> tuple[list, list]:
        return [r for r in refs if not r.lost], [r for r in refs if r.lost]

    def get(self, ref: _Reply, timeout: float | None = None) -> str:
        if ref.lost:
            raise _Timeout("timed out")
        return ref.value


class _ShardHandle:
    """A shard's handle: a drain runs on the shard at once (as in Ray, whether or not its
    reply is read in time)."""

    def __init__(self, shard: Any, ray_: _DrainRay) -> None:
        def drain(*args: Any) -> _Reply:
            lost = ray_.lose > 0
            ray_.lose -= lost
            return _Reply(asyncio.run(shard.drain_stats(*args)), lost)

        self.drain_stats = type("D", (), {"remote": staticmethod(drain)})


def _shard() -> Any:
    from actorq.replay.rate_limiter import SampleToInsertRatio
    from actorq.replay.specs import RatioGateSpec, UniformSpec
    from actorq.types import ArraySpec

    lim = SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=10, error_buffer=20.0)
    specs = json.dumps({"obs": ArraySpec((3,), "float32").to_json()})
    table = json.dumps(UniformSpec(100, 8, lim).to_json())
    return ray_actors.ReplayShard(0, specs, table, json.dumps(RatioGateSpec(lim).to_json()), 0)


def _backend(fake: _DrainRay, shard: Any, **more: Any) -> Any:
    """A ``RayBackend`` with its stats state as ``__init__`` leaves it, one shard, no cluster."""
    import threading

    from actorq.distributed.ray_backend import RayBackend, _ShardState

    b: Any = object.__new__(RayBackend)
    b.__dict__.update(
        _ray=fake, shards=[_ShardHandle(shard, fake)], _shard_state=[_ShardState()],
        _lock=threading.Lock(), _poll_lock=threading.Lock(), _steps=0, _busy=0.0, _wait=0.0,
        _infer=0.0, _env=0.0, _episodes=[], _status={}, _counts={}, shard_restarts=0,
        items_lost=0, _polls=0, _merge_warned=set(), _min_loop={},
        **more,
    )  # fmt: skip
    return b


def _insert(shard: Any, steps: int, episode: list[float]) -> None:
    meta = {"actor": 0, "env_steps": steps, "episodes": [episode], "status": {"incarnation": "a"}}
    asyncio.run(shard.insert(wire.encode_batch({}, meta)))


def test_a_drain_reply_lost_once_is_counted_with_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """The learner's wait for a drain timed out: the shard had reset its counters, so that
    window's env steps and episodes were lost (a run overshot its total_steps)."""
    monkeypatch.setattr(ray_actors, "node_id", lambda: "node")
    fake = _DrainRay()
    shard = _shard()
    b = _backend(fake, shard)
    _insert(shard, 100, [1.0, 10])
    fake.lose = 1
    b._poll()  # drained on the shard; the reply never read
    assert b.env_steps() == 0
    _insert(shard, 50, [2.0, 5])
    b._poll()
    b._poll()  # nothing new: counted once
    assert b.env_steps() == 150
    assert b.drain_episodes() == [(1.0, 10), (2.0, 5)]
    # Ray restarted the shard: its windows are numbered from 1 again, and counted
    restarted = _shard()
    b.shards = [_ShardHandle(restarted, fake)]
    _insert(restarted, 30, [3.0, 7])
    b._poll()
    assert (b.env_steps(), b.shard_restarts) == (180, 1)


def test_a_late_reply_from_a_restarted_shards_dead_incarnation_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two polls overlapping across a shard's restart (``refresh_sizes`` beside the poll
    thread): the dead incarnation's reply, read after its successor's, switched the state back,
    counted a second restart, and counted every window of both incarnations again."""
    monkeypatch.setattr(ray_actors, "node_id", lambda: "node")
    fake = _DrainRay()
    dead, successor = _shard(), _shard()
    b = _backend(fake, dead)
    _insert(dead, 100, [1.0, 10])
    b._poll()
    late = b.shards  # a drain the dead incarnation answers after its successor's
    b.shards = [_ShardHandle(successor, fake)]
    _insert(successor, 30, [3.0, 7])
    b._poll()
    assert (b.env_steps(), b.shard_restarts) == (130, 1)
    b.shards = late
    b._poll()
    b.shards = [_ShardHandle(successor, fake)]
    b._poll()
    assert (b.env_steps(), b.shard_restarts) == (130, 1)
    assert b._shard_state[0].incarnation == successor.incarnation


def test_windows_unread_for_long_are_merged_and_counted_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every drain reply missed the learner's deadline: the shard kept every window, each reply
    larger than the last. Past the cap the oldest are merged; each count arrives once."""
    monkeypatch.setattr(ray_actors, "node_id", lambda: "node")
    fake = _DrainRay()
    shard = _shard()
    b = _backend(fake, shard)
    cap = getattr(ray_actors.ReplayShard, "MAX_WINDOWS", 16)
    fake.lose = 3 * cap
    for k in range(3 * cap):
        _insert(shard, 1, [float(k), 1])
        b._poll()
    assert b.env_steps() == 0 and len(shard._unacked) <= cap
    b._poll()
    b._poll()
    assert b.env_steps() == 3 * cap
    assert [r for r, _ in b.drain_episodes()] == [float(k) for k in range(3 * cap)]
    assert "replay shard 0's last" in capsys.readouterr().err
    # a drain older than one the shard has run (Ray keeps no order for async actors) may find
    # windows the newer reply handed over, not yet acknowledged: it merges nothing
    for _ in range(2 * cap):
        asyncio.run(shard.drain_stats(shard.incarnation, 0, 1))
    assert len(shard._unacked) == 2 * cap + 1


class _Hung:
    """An actor Ray is restarting: its ``info`` never answers."""


class _InfoRay(_DrainRay):
    """Counts the calls that block the learner: a wait, or a read of an answer not there."""

    exceptions = type("E", (), {"RayError": Exception, "GetTimeoutError": _Timeout})

    def __init__(self) -> None:
        super().__init__()
        self.blocking = 0

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        self.blocking += 1
        return [r for r in refs if not isinstance(r, _Hung)], [
            r for r in refs if isinstance(r, _Hung)
        ]

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        if isinstance(ref, _Hung):
            self.blocking += 1  # waits out its timeout
            raise _Timeout("timed out")
        return super().get(ref, timeout)


class _ActorHandle:
    def __init__(self, pid: int | None, asked: list[int]) -> None:
        def info() -> Any:
            asked.append(pid or -1)
            return _Hung() if pid is None else _Reply(json.dumps({"pid": pid}), lost=False)

        self.info = type("I", (), {"remote": staticmethod(info)})


def test_the_learner_asks_no_actor_for_pids_and_waits_once_for_infos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every log interval asked every actor for its pid in turn, up to 10 s each for one Ray
    was restarting: the pids now come with the actors' inserts, and ``actor_info`` waits
    once for all answers, those that do not come in time counted as not alive."""
    monkeypatch.setattr(ray_actors, "node_id", lambda: "node")
    fake = _InfoRay()
    shard = _shard()
    asked: list[int] = []
    b = _backend(fake, shard, actors=[_ActorHandle(p, asked) for p in (11, None, 13, None)])
    for actor, pid in ((2, 13), (0, 11)):
        meta = {"actor": actor, "status": {"incarnation": "a", "pid": pid}}
        asyncio.run(shard.insert(wire.encode_batch({}, meta)))
    b._poll()
    fake.blocking = 0
    pids = b.pids()
    assert asked == []  # no actor asked
    assert pids == [11, 13]
    infos = b.actor_info()
    assert [i.get("pid") for i in infos] == [11, None, 13, None]
    assert [i["alive"] for i in infos] == [True, False, True, False]
    assert fake.blocking == 1  # one wait for all four, not one per actor that does not answer
