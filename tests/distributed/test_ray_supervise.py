"""RayBackend.supervise without a cluster: which of Ray's errors about an actor's loop restart
it and which stop the run, with one line (Ray's own errors are real, the cluster a stand-in)."""

from __future__ import annotations

from typing import Any

import pytest

ray = pytest.importorskip("ray")

from actorq.distributed.local import CRASH_LOOP  # noqa: E402
from actorq.distributed.ray_backend import RayBackend  # noqa: E402
from actorq.errors import ActorFailedError  # noqa: E402

NODE = "a" * 56


class _Ray:
    """Every actor loop has ended with ``error``; ``alive``: whether the actors' node is."""

    exceptions = ray.exceptions

    def __init__(self, error: BaseException, alive: bool = True) -> None:
        self.error, self.alive = error, alive
        self.gcs: BaseException | None = None  # raised by nodes(): the GCS unreachable
        self.running = False  # the loops run on: none has ended

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list]:
        return ([], list(refs)) if self.running else (list(refs), [])

    def get(self, ref: Any) -> Any:
        raise self.error

    def nodes(self) -> list[dict[str, Any]]:
        if self.gcs is not None:
            raise self.gcs
        return [{"NodeID": NODE, "Alive": self.alive}]


class _Actor:
    def __init__(self) -> None:
        self.run = type("Run", (), {"remote": staticmethod(lambda *loop: object())})()


def _backend(error: BaseException, alive: bool = True) -> RayBackend:
    import threading

    b = object.__new__(RayBackend)  # only what supervise() touches
    b._ray = _Ray(error, alive)
    b.actors = [_Actor()]
    b.actor_node = [NODE]
    b._runs = {object(): 0}
    b._deaths = {}
    b.actor_restarts = 0
    # what __init__ and _build add for supervise() since, and what pids() reads
    b.__dict__.update(
        _loop=[0], _unchecked={}, _min_loop={}, _status={}, _counts={}, _lock=threading.Lock()
    )
    return b


def _one_line(e: pytest.ExceptionInfo[ActorFailedError]) -> str:
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_killed_actor_is_restarted_until_it_dies_too_often() -> None:
    """An actor killed over and over (a native crash, the OOM killer, a node that keeps losing
    it) was resubmitted forever; now it stops the run as on the local backend."""
    b = _backend(ray.exceptions.ActorDiedError())
    for n in range(1, CRASH_LOOP):
        assert b.supervise() == 1 and b.actor_restarts == n
    with pytest.raises(ActorFailedError) as e:
        b.supervise()
    assert f"actor 0 died {CRASH_LOOP} times in 60 s" in _one_line(e)
    assert "The actor died unexpectedly" in str(e.value)


def test_an_actor_whose_init_failed_stops_the_run_at_once() -> None:
    text = (
        "The actor died because of an error raised in its creation task, ray::RayActorWorker"
        '.__init__() (pid=1)\n  File "ray_actors.py", line 9, in __init__\n'
        "actorq.resources.ResourceError: shared memory: no room for 64.0 MiB in /dev/shm"
    )
    b = _backend(ray.exceptions.RayActorError(error_msg=text, actor_init_failed=True))
    with pytest.raises(ActorFailedError) as e:
        b.supervise()
    assert _one_line(e) == (
        "actor 0 could not start: ResourceError: shared memory: no room for 64.0 MiB in /dev/shm"
    )


def test_an_actor_whose_node_is_gone_stops_the_run_at_once() -> None:
    # pinned to its node (hard affinity): Ray can never place it again
    b = _backend(ray.exceptions.ActorDiedError(), alive=False)
    with pytest.raises(ActorFailedError) as e:
        b.supervise()
    assert f"actor 0 is gone with its node {NODE[:12]}" in _one_line(e)


@pytest.mark.parametrize(
    "error",
    [
        ray.exceptions.ActorUnschedulableError("its node is dead\nmore detail"),
        ray.exceptions.OwnerDiedError("ab" * 14, None, ""),
    ],
)
def test_any_other_ray_error_is_one_line(error: BaseException) -> None:
    """Not RayActorErrors: they reached the CLI as a traceback."""
    b = _backend(error)
    with pytest.raises(ActorFailedError) as e:
        b.supervise()
    assert _one_line(e).startswith("actor 0 failed: ")


def test_a_dead_actors_line_says_why_it_died() -> None:
    """An actor killed by the OOM killer or a signal: the line was Ray's generic first line,
    "The actor died unexpectedly before finishing this task.", its reason (the last line)
    dropped."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext

    reason = (
        "The actor is dead because its worker process has died. Worker exit type: "
        "NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running out of "
        "memory."
    )
    context = ActorDiedErrorContext(
        error_message=reason, actor_id=b"a" * 16, pid=123, class_name="RayActorWorker"
    )
    b = _backend(ray.exceptions.ActorDiedError(context), alive=False)
    with pytest.raises(ActorFailedError) as e:
        b.supervise()
    where = f"actor 0 is gone with its node {NODE[:12]}, where it is pinned"
    assert _one_line(e) == f"{where}: {reason}"


def test_an_unavailable_actor_counts_as_a_death_but_keeps_its_status() -> None:
    """A killed actor Ray is restarting answers ActorUnavailableError, as one briefly
    unreachable does: counted (and the crash-loop rule applies: a kill at every start stops
    the run), but its pid stays, since it may be the same process still looping."""
    b = _backend(ray.exceptions.ActorUnavailableError("connection lost", None))
    b._keep_status("0", {"incarnation": "a", "loop": 0, "pid": 11})
    assert b.supervise() == 1 and len(b._runs) == 1  # asked again: run() waits for its loop
    assert b.actor_restarts == 1 and b.pids() == [11]
    for _ in range(CRASH_LOOP - 2):
        assert b.supervise() == 1
    with pytest.raises(ActorFailedError, match=rf"died {CRASH_LOOP} times in 60 s"):
        b.supervise()


def test_a_death_while_the_gcs_is_unreachable_waits_for_its_node_table() -> None:
    """ray.nodes() raising (the GCS restarting or gone) reached the CLI as a traceback."""
    b = _backend(ray.exceptions.ActorDiedError())
    b._ray.gcs = ConnectionError("GCS unreachable\nretrying")
    assert b.supervise() == 1 and not b._runs  # counted; not resubmitted while unknown
    b._ray.running = True
    assert b.supervise() == 0 and not b._runs  # still unknown
    b._ray.gcs = None
    assert b.supervise() == 0 and len(b._runs) == 1  # its node is alive: resubmitted
    # past the grace, one line
    late = _backend(ray.exceptions.ActorDiedError())
    late._ray.gcs = ConnectionError("GCS unreachable\nretrying")
    late.NODES_GRACE_S = 0.0
    with pytest.raises(ActorFailedError) as e:
        late.supervise()
    assert _one_line(e).endswith("Ray's node table has not answered for 0 s: GCS unreachable")


def test_a_dead_actors_pid_is_gone_until_its_successor_reports_its_own() -> None:
    """pids() gave a dead incarnation's pid until its successor's first insert (a callback
    might signal a dead or reused process), and a late insert of the dead one brought it back."""
    b = _backend(ray.exceptions.ActorDiedError())
    b._keep_status("0", {"incarnation": "a", "loop": 0, "pid": 11})
    assert b.pids() == [11]
    assert b.supervise() == 1
    assert b.pids() == []
    b._keep_status("0", {"incarnation": "a", "loop": 0, "pid": 11, "rejected": 2})  # late
    assert b.pids() == [] and b._total("rejected") == 2  # its counts still count
    b._keep_status("0", {"incarnation": "b", "loop": 1, "pid": 12})
    assert b.pids() == [12]


def test_a_second_run_while_a_loop_runs_waits_for_it() -> None:
    """What lets supervise() ask an unavailable actor again: a second loop beside the first
    would step the same envs; it waits for the first to end, and a stopped actor's returns."""
    import json
    import threading

    from actorq.distributed.ray_actors import RayActorWorker

    w = object.__new__(RayActorWorker)  # no cluster: only what run() reads before looping
    w.incarnation, w._looping, w._stop = "abc", threading.Lock(), threading.Event()
    w._looping.acquire()  # the first loop
    out: list[str] = []
    second = threading.Thread(target=lambda: out.append(w.run(1)), daemon=True)
    second.start()
    second.join(0.3)
    assert second.is_alive() and not out  # waiting, not a second loop
    w._stop.set()
    w._looping.release()  # the first loop ends (stopped)
    second.join(10)
    assert json.loads(out[0]) == {"stopped": True, "incarnation": "abc"}
