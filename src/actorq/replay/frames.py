"""Pixel replay that stores each frame once: stacked observations and n-step transitions are
rebuilt from indices when sampled.

A DQN transition on Atari is ``(s_t, a_t, R, discount, s_{t+n})`` with ``s`` a stack of 4
84×84 uint8 frames (Mnih et al., Nature 2015). Stored as such (:class:`~actorq.replay.ring.
ReplayBuffer`), one transition holds 8 frames, 7 of which are also in its neighbours. Here, as in
Dopamine's circular replay (Castro et al., 2018), every environment step is one *slot* holding
the newest frame of its observation, the action taken, the reward and flags; a stack is the
frame of its slot and of the up to 3 slots before it in the same episode (an episode's first
frame repeated before it: Gymnasium's ``FrameStackObservation`` pads a new episode so), and the
n-step return, discount and next stack are read forward from the slot when it is sampled.

Memory, per transition: one 84×84 frame (7,056 B) + action (8 B, int64) + reward (4 B) +
flags (1 B) = 7,069 B; 1M transitions ≈ 7.07 GB (plus one slot per episode for its final
observation). Stored naively, one transition is two stacks, 2 × 4 × 7,056 = 56,448 B (56 GB for
1M; 28 GB counting ``s_t``'s stack only). ``tests/replay/test_frames.py`` checks the bytes.

Streams: slots are kept per environment instance (actor × env, a *stream*), each stream a ring
of ``capacity // streams`` slots, so the slots of one episode are consecutive and a stack or an
n-step window is plain index arithmetic. :class:`FrameAdder` (actor side, numpy only) turns
vector env steps into *records* — one per new frame, carrying the action, reward and end flags
of the step that led to it — and :meth:`FrameStackReplay.insert` files them. A sampled
transition is identical to the one :class:`~actorq.replay.adders.NStepAdder` emits for the same
step (the reward up to float rounding order), no stack crosses a reset, and a slot whose stack or
n-step window is not (or no longer) stored is never sampled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actorq.replay.npz import check_header, npz_headers
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.tables import UniformTable
from actorq.types import ArraySpec, Batch

#: the most a saved counter may hold (frames written per stream, transitions filed)
MAX_COUNT = 2**62
#: slot flags: the slot's frame starts an episode / is an episode's final observation (no action
#: taken from it) / the step taken from the slot terminated / truncated the episode
FIRST, END, TERM, TRUNC = 1, 2, 4, 8


def record_specs(frame: ArraySpec, action: ArraySpec) -> dict[str, ArraySpec]:
    """Fields of one :class:`FrameAdder` record: the stream it belongs to, its new frame, its
    flags (``FIRST``/``END`` for the frame, ``TERM``/``TRUNC`` for the step that led to it), and
    that step's action and reward (zero in a ``FIRST`` record: no step led to it)."""
    return {
        "stream": ArraySpec((), "int32"),
        "frame": frame,
        "flags": ArraySpec((), "uint8"),
        "action": action,
        "reward": ArraySpec((), "float32"),
    }


class FrameAdder:
    """Actor side: vector env steps of stacked observations ``(K, stack, H, W)`` as records
    (:func:`record_specs`) of streams ``first_stream .. first_stream + K - 1``. One record per env
    and step, two when an episode ends (its final frame, then the next episode's first)."""

    at_boundary = True  # records carry no policy version

    def __init__(self, num_envs: int, first_stream: int, action: ArraySpec) -> None:
        self.k = num_envs
        self.streams = np.arange(first_stream, first_stream + num_envs, dtype=np.int32)
        self.action = action
        self._first: np.ndarray | None = None  # first frames not yet emitted

    def observe_first(self, obs: np.ndarray) -> None:
        self._first = np.array(np.asarray(obs)[:, -1], copy=True)

    def _firsts(self, ks: np.ndarray, frames: np.ndarray) -> Batch:
        n = len(ks)
        return {
            "stream": self.streams[ks],
            "frame": frames,
            "flags": np.full(n, FIRST, np.uint8),
            "action": self.action.zeros(n),
            "reward": np.zeros(n, np.float32),
        }

    def add(
        self,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        final_obs: np.ndarray | None = None,
        extras: dict[str, np.ndarray] | None = None,
        version: int = 0,
    ) -> Batch:
        """Records of one vector step (same arguments as ``NStepAdder.add``), in the order the
        table files them: pending first frames, this step's new frames, the next episodes' first
        frames."""
        parts: list[Batch] = []
        all_k = np.arange(self.k)
        if self._first is not None:
            parts.append(self._firsts(all_k, self._first))
            self._first = None
        term, trunc = np.asarray(terminated, bool), np.asarray(truncated, bool)
        done = term | trunc
        frames = np.array(np.asarray(next_obs)[:, -1], copy=True)
        if done.any():
            assert final_obs is not None, "final_obs required when an episode ends"
            frames[done] = np.asarray(final_obs)[done, -1]
        flags = np.where(done, END, 0) | np.where(term, TERM, 0) | np.where(trunc & ~term, TRUNC, 0)
        parts.append(
            {
                "stream": self.streams.copy(),
                "frame": frames,
                "flags": flags.astype(np.uint8),
                "action": np.asarray(action, self.action.dtype).reshape(self.k, *self.action.shape),
                "reward": np.asarray(reward, np.float32),
            }
        )
        if done.any():
            ks = np.flatnonzero(done)
            parts.append(self._firsts(ks, np.array(np.asarray(next_obs)[ks, -1], copy=True)))
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


class FrameStackReplay:
    """Slots of ``streams`` rings of ``capacity // streams`` frames each, sampled as n-step
    transitions of ``stack``-frame observations (module docstring). ``sample`` returns the
    fields of :func:`~actorq.types.transition_specs`; ``insert`` takes :func:`record_specs`."""

    def __init__(
        self,
        capacity: int,
        streams: int,
        frame: ArraySpec,
        action: ArraySpec,
        stack: int = 4,
        n: int = 1,
        gamma: float = 0.99,
    ) -> None:
        if streams < 1 or stack < 1 or n < 1:
            raise ValueError("streams, stack and n must be >= 1")
        self.slots = capacity // streams
        if self.slots < stack + n + 1:
            raise ValueError(
                f"replay of {capacity} over {streams} streams leaves {self.slots} slots a "
                f"stream; a {stack}-frame, {n}-step transition needs {stack + n + 1}"
            )
        self.streams, self.stack, self.n, self.gamma = streams, stack, n, float(gamma)
        self.frame, self.action = frame, action
        self.frames = np.zeros((streams, self.slots, *frame.shape), frame.dtype)
        self.actions = np.zeros((streams, self.slots, *action.shape), action.dtype)
        self.rewards = np.zeros((streams, self.slots), np.float32)
        self.flags = np.zeros((streams, self.slots), np.uint8)
        #: frames written per stream, ever (slot of frame a: a % slots)
        self.written = np.zeros(streams, np.int64)
        self.inserts = 0  # steps (transitions) filed, ever
        # as NStepAdder: gamma^k in float64, rounded to float32
        self._powers = (self.gamma ** np.arange(n + 1)).astype(np.float32)

    @property
    def capacity(self) -> int:
        return self.streams * self.slots

    @property
    def size(self) -> int:
        """Slots held (frames; about one transition each)."""
        return int(np.minimum(self.written, self.slots).sum())

    def nbytes(self) -> int:
        """Bytes of the stored arrays (what the transitions cost in memory)."""
        return sum(a.nbytes for a in (self.frames, self.actions, self.rewards, self.flags))

    # -- filing records --------------------------------------------------------------------------
    def insert(self, records: Batch) -> None:
        """File :class:`FrameAdder` records, in order (a stream's records must arrive in the
        order its actor emitted them; streams may interleave). ``ValueError`` for a step record
        of a stream with no episode started."""
        streams = np.asarray(records["stream"])
        if len(streams) and (streams.min() < 0 or streams.max() >= self.streams):
            raise ValueError(f"record of stream {int(streams.max())}; replay has {self.streams}")
        for i, s in enumerate(streams.tolist()):
            fl = int(records["flags"][i])
            w = int(self.written[s])
            if not fl & FIRST:  # the step from the stream's last slot led here: fill it in
                prev = (w - 1) % self.slots
                if w == 0 or self.flags[s, prev] & END:
                    raise ValueError(f"stream {s}: a step record with no episode under way")
                self.actions[s, prev] = records["action"][i]
                self.rewards[s, prev] = records["reward"][i]
                self.flags[s, prev] |= fl & (TERM | TRUNC)
                self.inserts += 1
            slot = w % self.slots
            self.frames[s, slot] = records["frame"][i]
            self.flags[s, slot] = fl & (FIRST | END)
            self.written[s] = w + 1

    add = insert  # the ring's name (UniformTable files items with ``ring.add``)

    # -- rebuilding transitions ------------------------------------------------------------------
    def _flag(self, s: np.ndarray, a: np.ndarray, bit: int) -> np.ndarray:
        return np.asarray(self.flags[s, a % self.slots] & bit, bool)

    def _stack_slots(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Absolute slots of the stacks ending at ``a`` (B, stack), oldest first: back through
        the episode, its first frame repeated before it."""
        out = np.empty((len(a), self.stack), np.int64)
        cur = a.copy()
        out[:, -1] = cur
        for k in range(2, self.stack + 1):
            cur = np.where(self._flag(s, cur, FIRST), cur, cur - 1)
            out[:, -k] = cur
        return out

    def _window(
        self, s: np.ndarray, a: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(valid, R, discount, next slot)`` of the n-step transitions starting at ``a``."""
        w = self.written[s]
        oldest = w - np.minimum(w, self.slots)
        valid = (a >= oldest) & (a + 1 < w) & ~self._flag(s, a, END)
        valid &= self._stack_slots(s, np.clip(a, oldest, None))[:, 0] >= oldest
        ret = np.zeros(len(a), np.float32)
        disc = np.full(len(a), self._powers[self.n], np.float32)
        nxt = a + self.n
        running = valid.copy()
        for j in range(self.n):
            at = a + j
            # acted: the next frame is stored and continues the episode (an actor that
            # restarted mid-episode began a new one there: no step was taken from ``at``)
            acted = (at + 1 < w) & ~self._flag(s, at + 1, FIRST)
            valid &= acted | ~running  # the window must be complete (or end) before w
            running &= acted
            r = self.rewards[s, at % self.slots]
            ret = np.where(running, ret + self._powers[j] * r, ret)
            term, trunc = self._flag(s, at, TERM), self._flag(s, at, TRUNC)
            ended = running & (term | trunc)
            disc = np.where(ended & term, np.float32(0.0), disc)
            disc = np.where(ended & ~term, self._powers[j + 1], disc)
            nxt = np.where(ended, at + 1, nxt)
            running &= ~ended
        valid &= ~running | (a + self.n < w)
        return valid, ret, disc, nxt

    def _gather(self, s: np.ndarray, slots: np.ndarray) -> np.ndarray:
        return self.frames[s[:, None], slots % self.slots]

    def transitions(self, s: np.ndarray, a: np.ndarray) -> Batch:
        """The transitions starting at absolute slots ``a`` of streams ``s`` (all valid:
        :meth:`valid_starts`)."""
        s, a = np.asarray(s, np.int64), np.asarray(a, np.int64)
        valid, ret, disc, nxt = self._window(s, a)
        if not valid.all():
            raise ValueError("not a stored transition")
        return {
            "obs": self._gather(s, self._stack_slots(s, a)),
            "action": self.actions[s, a % self.slots],
            "reward": ret,
            "discount": disc,
            "next_obs": self._gather(s, self._stack_slots(s, nxt)),
        }

    def valid_starts(self) -> tuple[np.ndarray, np.ndarray]:
        """Every stored transition's ``(stream, absolute slot)``, stream by stream, oldest
        first."""
        held = np.minimum(self.written, self.slots)
        s = np.repeat(np.arange(self.streams), held)
        a = np.concatenate([np.arange(w - h, w) for w, h in zip(self.written, held, strict=True)])
        valid = self._window(s, a.astype(np.int64))[0]
        return s[valid], a[valid].astype(np.int64)

    def sample(self, batch_size: int, rng: np.random.Generator, max_rounds: int = 64) -> Batch:
        """``batch_size`` transitions drawn uniformly from the stored slots (a slot that starts
        no stored transition — a final frame, the newest ``n`` of a stream, the oldest whose
        stack was overwritten — is drawn again)."""
        return self.transitions(*self._draw(batch_size, rng, max_rounds))

    def _draw(
        self, batch_size: int, rng: np.random.Generator, max_rounds: int = 64
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(stream, absolute slot)`` of ``batch_size`` transitions, as :meth:`sample` draws."""
        held = np.minimum(self.written, self.slots)
        total = int(held.sum())
        if total == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        ends = np.cumsum(held)
        s = np.zeros(batch_size, np.int64)
        a = np.zeros(batch_size, np.int64)
        todo = np.arange(batch_size)
        for _ in range(max_rounds):
            u = rng.integers(0, total, size=len(todo))
            ss = np.searchsorted(ends, u, side="right")
            aa = self.written[ss] - held[ss] + (u - (ends[ss] - held[ss]))
            ok = self._window(ss, aa)[0]
            s[todo[ok]], a[todo[ok]] = ss[ok], aa[ok]
            todo = todo[~ok]
            if not len(todo):
                return s, a
        raise RuntimeError("replay holds no complete transition yet")

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Stacked observations of ``n`` sampled transitions (calibration, agreement checks);
        none while the replay holds no complete transition. Called at every publish, so the
        O(capacity) scan of :meth:`valid_starts` runs only when sampling finds nothing."""
        try:
            s, a = self._draw(n, rng)
        except RuntimeError:  # empty, or complete transitions too rare to draw by rejection
            s, a = self.valid_starts()
            if not len(s):
                return np.zeros((0, self.stack, *self.frame.shape), self.frame.dtype)
            pick = rng.integers(0, len(s), size=n)
            s, a = s[pick], a[pick]
        return self._gather(s, self._stack_slots(s, a))

    # -- safe persistence (npz, never pickle) -----------------------------------------------------
    def save(self, path: str | Path) -> None:
        """All slots and counters as one npz: about ``nbytes()`` (7.07 GB at 1M slots of 84×84;
        not compressed: a checkpoint must not cost minutes of CPU)."""
        np.savez(
            path,
            frames=self.frames,
            actions=self.actions,
            rewards=self.rewards,
            flags=self.flags,
            written=self.written,
            inserts=np.array(self.inserts, np.int64),
            layout=np.array([self.streams, self.slots, self.stack, self.n], np.int64),
        )

    def load(self, path: str | Path) -> None:
        """Replace the contents with a saved replay; ``ValueError`` (nothing changed) unless it
        has this replay's layout, shapes and dtypes and sane counters."""
        want = {
            "frames": self.frames,
            "actions": self.actions,
            "rewards": self.rewards,
            "flags": self.flags,
            "written": self.written,
        }
        headers = npz_headers(path)  # sizes checked before any array is read
        missing = {*want, "inserts", "layout"} - set(headers)
        if missing:
            raise ValueError(f"frame replay file lacks {sorted(missing)}")
        for k, v in want.items():
            check_header(headers, k, v.shape, v.dtype)
        check_header(headers, "inserts", ())
        check_header(headers, "layout", (4,))
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in want}
            inserts, layout = z["inserts"], z["layout"]
        mine = [self.streams, self.slots, self.stack, self.n]
        if layout.tolist() != mine:
            raise ValueError(
                f"frame replay saved as [streams, slots, stack, n] = {layout.tolist()}, "
                f"this run has {mine}"
            )
        if not np.isfinite(data["rewards"]).all():
            raise ValueError("frame replay rewards have NaN or Inf")
        if not np.issubdtype(inserts.dtype, np.integer):  # its shape: () (the header's)
            raise ValueError(f"frame replay's inserts is {inserts.dtype}{list(inserts.shape)}")
        written = data["written"]
        # a counter past 2**62 would overflow the int64 sums and C longs it goes into later
        if (written < 0).any() or (written > MAX_COUNT).any() or not 0 <= int(inserts) <= MAX_COUNT:
            raise ValueError("frame replay counters are negative or past 2**62")
        frames = sum(int(w) for w in written)  # Python ints: streams × 2**62 overflows int64
        if int(inserts) > frames:  # each transition filed follows a frame written
            raise ValueError(f"frame replay counts {int(inserts)} transitions from {frames} frames")
        if (data["flags"] & ~np.uint8(FIRST | END | TERM | TRUNC)).any():
            raise ValueError("frame replay flags hold unknown bits")
        if self.action.outside(data["actions"]):  # an index the network has no output for
            raise ValueError(
                f"frame replay actions lie outside [{self.action.low}, {self.action.high}]"
            )
        for k, v in data.items():
            want[k][...] = v
        self.inserts = int(inserts)


class FrameTable(UniformTable):
    """The ``frames`` replay kind: :class:`UniformTable`'s samples-per-insert rule over a
    :class:`FrameStackReplay` (DQN on frame-stacked pixels). Items inserted are
    :class:`FrameAdder` records (about one per transition); batches are n-step transitions.
    Host memory only (no device mirror: a batch's stacks are gathered on the host)."""

    kind = "frames"

    def __init__(
        self,
        replay: FrameStackReplay,
        specs: dict[str, ArraySpec],
        limiter: SampleToInsertRatio,
        batch_size: int,
    ) -> None:
        self.ring = replay  # type: ignore[assignment]  # the ring's methods, another layout
        self.frames = replay
        self.specs = dict(specs)
        self.limiter, self.batch_size = limiter, batch_size
        self.inserts = self.samples = self.credit = 0

    def sample(self, n: int, rng: np.random.Generator) -> Batch:
        return self.frames.sample(n, rng)

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.frames.sample_states(n, rng)
