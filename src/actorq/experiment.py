"""The learner's loop and its named pieces, as one import: ``from actorq.experiment import
train``. The code lives in :mod:`actorq.run`: :mod:`~actorq.run.loop` (:func:`train`),
:mod:`~actorq.run.resume` (config, run directory, restore), :mod:`~actorq.run.publisher`
(snapshots and checkpoints), :mod:`~actorq.run.monitor` (evaluation, logging, progress, stop
signals), :mod:`~actorq.run.precision` (``--precision auto``) and :mod:`~actorq.run.report`
(the result and summary)."""

from actorq.agents.policy_io import (
    MLPPolicyIO,
    PolicyIO,
    compare_policies,
    learner_snapshot,
    policy_is_finite,
)
from actorq.run.loop import start_backend, train
from actorq.run.monitor import Evaluator, IntervalLogger, log_interval
from actorq.run.publisher import Checkpointer, Publisher, check_losses
from actorq.run.report import (
    CONFIRM_SEED,
    EVAL_SEED,
    FINAL_EVAL_SEED,
    TrainResult,
    final_report,
    print_summary,
    registered_threshold,
    run_report,
    write_summary,
)
from actorq.run.resume import (
    RESUME_OVERRIDES,
    Counters,
    Loaded,
    load_replay,
    open_run_dir,
    resolve_config,
    restore,
    resume_conflicts,
    resume_device,
    write_config,
)

__all__ = [
    "CONFIRM_SEED",
    "EVAL_SEED",
    "FINAL_EVAL_SEED",
    "RESUME_OVERRIDES",
    "Checkpointer",
    "Counters",
    "Evaluator",
    "IntervalLogger",
    "Loaded",
    "MLPPolicyIO",
    "PolicyIO",
    "Publisher",
    "TrainResult",
    "check_losses",
    "compare_policies",
    "final_report",
    "learner_snapshot",
    "load_replay",
    "log_interval",
    "open_run_dir",
    "policy_is_finite",
    "print_summary",
    "registered_threshold",
    "resolve_config",
    "restore",
    "resume_conflicts",
    "resume_device",
    "run_report",
    "start_backend",
    "train",
    "write_config",
    "write_summary",
]
