"""The run directory: what ``actorq train`` writes and every later command reads, and a run's
trained policy for users (:func:`load`)."""

from actorq.run.directory import load_run_config, load_run_policy
from actorq.run.policy import TrainedPolicy, load

__all__ = ["TrainedPolicy", "load", "load_run_config", "load_run_policy"]
