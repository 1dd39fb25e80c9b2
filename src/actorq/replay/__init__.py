"""Replay: preallocated ring buffer, n-step adder, samples-per-insert rate limiter."""

from actorq.replay.adders import NStepAdder
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.ring import ReplayBuffer

__all__ = ["NStepAdder", "ReplayBuffer", "SampleToInsertRatio"]
