"""How a learner's update runs on its device, without host round trips.

An agent writes its update as a pure *step*: tensors of one batch in, metric tensors out
(forward, backward, gradient clip, optimizer step), and this module runs it:

* ``eager``: the step as written, one kernel launch per op;
* ``compile``: ``torch.compile`` of the step (Inductor fuses the elementwise ops);
* ``graph``: the whole step, optimizer included, captured once as a CUDA graph and replayed
  (PyTorch's "whole-network capture"; the recipe LeanRL applies to CleanRL). One launch per
  update: what removes the per-op host overhead that bounds small and medium MLPs on a GPU.

Every mode computes the same update; ``tests/agents/test_step.py`` checks K updates of each
against K eager ones. Metrics stay on the device (:class:`DeviceMetrics`) until the loop reads
them once per log interval: a ``float(loss)`` per update is a device sync per update, which
caps a GPU learner at the host's pace.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import Literal

import torch

from actorq.replay.device import to_device
from actorq.types import Batch

Mode = Literal["eager", "compile", "graph"]
MODES: tuple[str, ...] = ("auto", "eager", "compile", "graph")
StepFn = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]

#: Counts every read of a metric from the device (the one place metrics leave it); tests
#: assert that a learner makes none between log intervals.
HOST_READS = [0]


def resolve_mode(mode: str, device: torch.device) -> Mode:
    """``auto``: a captured graph on CUDA, eager on the CPU. On the CPU a step is a few large
    kernels and the per-op overhead is small (``benchmarks/learner_limit.py`` measures
    compile's gain there, and it does not pay for its compile time); ``graph`` needs CUDA."""
    if mode == "auto":
        return "graph" if device.type == "cuda" else "eager"
    if mode == "graph" and device.type != "cuda":
        raise ValueError("--learner-mode graph needs a CUDA learner (--device cuda)")
    if mode not in MODES:
        raise ValueError(f"--learner-mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode  # type: ignore[return-value]


class DeviceMetrics:
    """Sums of metric tensors on the device, read (one sync) as means."""

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._host: dict[str, list[float]] = {}
        self.count = 0

    def add(self, metrics: dict[str, torch.Tensor]) -> None:
        if not self._sums:
            self._sums = {k: v.detach().float().clone() for k, v in metrics.items()}
        else:
            keys = list(self._sums)
            torch._foreach_add_([self._sums[k] for k in keys], [metrics[k] for k in keys])
        self.count += 1

    def add_host(self, metrics: dict[str, float]) -> None:
        """Metrics that are host numbers already (computed from numpy): kept as means too."""
        for k, v in metrics.items():
            self._host.setdefault(k, []).append(v)

    def read(self) -> dict[str, float]:
        """Means since the last read, and reset. The only device read of metrics."""
        out: dict[str, float] = {}
        if self._sums:
            HOST_READS[0] += 1
            keys = list(self._sums)
            values = torch.stack([self._sums[k] for k in keys]).div_(self.count).tolist()
            out.update(zip(keys, values, strict=True))
        out.update({k: sum(v) / len(v) for k, v in self._host.items()})
        self._sums, self._host, self.count = {}, {}, 0
        return out


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's learning rate, in place where it is a tensor (a captured update
    reads it there; replacing it would leave the graph on the old one)."""
    for g in opt.param_groups:
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


def copy_params_(dst: torch.nn.Module, src: torch.nn.Module) -> None:
    """``dst ← src`` in place (a target network): one fused copy, no state_dict round trip."""
    d = [*dst.parameters(), *dst.buffers()]
    s = [*src.parameters(), *src.buffers()]
    with torch.no_grad():
        torch._foreach_copy_(d, s)


class StepRunner:
    """Runs a learner's step in one of the modes above.

    ``graph`` captures lazily at the first call (shapes are then fixed: a batch of another
    size, PPO's last short minibatch say, runs eagerly). Capturing needs warm-up steps that
    would change the learner, so the modules' and optimizers' state is saved before them and
    put back after: the first real update starts from exactly where the learner was.
    """

    def __init__(
        self,
        step: StepFn,
        mode: Mode,
        modules: Iterable[torch.nn.Module | torch.Tensor],
        optimizers: Iterable[torch.optim.Optimizer],
    ) -> None:
        self.step, self.mode = step, mode
        self.modules, self.optimizers = list(modules), list(optimizers)
        self._fn: StepFn = step
        if mode == "compile":
            self._fn = torch.compile(step)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static_in: dict[str, torch.Tensor] = {}
        self._static_out: dict[str, torch.Tensor] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}

    def reset(self) -> None:
        """Forget the captured graph: the next call captures again. After a learner's state is
        loaded (an optimizer's ``load_state_dict`` makes new state tensors and settings, which
        a captured graph would not see)."""
        self._graph = None
        self._static_in, self._static_out, self._shapes = {}, {}, {}

    def _tensor_lrs(self) -> None:
        """Learning rates as device tensors, in every mode (so the modes compute alike): a
        float would be frozen into a captured graph (and recompile a compiled step at each
        change); a tensor is read at each call, and a schedule (PPO's annealing) sets it
        with :func:`set_lr`. Checked at every call: loading an optimizer's state puts floats
        back."""
        for opt in self.optimizers:
            for g in opt.param_groups:
                if not isinstance(g["lr"], torch.Tensor):
                    g["lr"] = torch.tensor(float(g["lr"]), device=g["params"][0].device)

    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self._tensor_lrs()
        if self.mode != "graph":
            return self._fn(batch)
        if self._graph is None:
            self._capture(batch)
        if {k: tuple(v.shape) for k, v in batch.items()} != self._shapes:
            return self.step(batch)
        for k, v in batch.items():
            self._static_in[k].copy_(v, non_blocking=True)
        assert self._graph is not None
        self._graph.replay()
        return self._static_out

    # -- capture ------------------------------------------------------------------------------
    def _module_state(self) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for m in self.modules:
            out += [m] if isinstance(m, torch.Tensor) else [*m.parameters(), *m.buffers()]
        return out

    @staticmethod
    def _opt_state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
        return [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]

    def _capture(self, batch: dict[str, torch.Tensor]) -> None:
        for opt in self.optimizers:
            for g in opt.param_groups:
                g["capturable"] = True  # Adam's step counter read on the device
        with torch.no_grad():
            saved_modules = [t.clone() for t in self._module_state()]
            saved_opts = [[t.clone() for t in self._opt_state(o)] for o in self.optimizers]
        self._static_in = {k: v.detach().clone() for k, v in batch.items()}
        self._shapes = {k: tuple(v.shape) for k, v in batch.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # builds optimizer state and settles cuBLAS workspaces
                self.step(self._static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._static_out = self.step(self._static_in)
        # put back what the warm-up steps changed (capture itself runs nothing)
        with torch.no_grad():
            torch._foreach_copy_(self._module_state(), saved_modules)
            for opt, saved in zip(self.optimizers, saved_opts, strict=True):
                now = self._opt_state(opt)
                if saved:
                    torch._foreach_copy_(now, saved)
                else:  # a fresh optimizer: its state starts at zero
                    torch._foreach_zero_(now)
        self._graph = graph


class TorchLearner(abc.ABC):
    """The update machinery shared by the torch learners (DQN, D4PG, PPO's minibatch step):
    ``learn`` runs :meth:`step` through a :class:`StepRunner` and keeps its metrics on the
    device; ``read_metrics`` reads them (one sync); ``update`` is both, for callers that want
    numbers per update (tests, notebooks)."""

    device: torch.device
    runner: StepRunner
    metrics: DeviceMetrics

    def init_runner(
        self,
        mode: str,
        modules: Iterable[torch.nn.Module | torch.Tensor],
        optimizers: Iterable[torch.optim.Optimizer],
    ) -> None:
        self.runner = StepRunner(self.step, resolve_mode(mode, self.device), modules, optimizers)
        self.metrics = DeviceMetrics()

    @abc.abstractmethod
    def step(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One update on a batch already on the device; metric tensors out (no sync)."""

    def after_step(self) -> None:  # noqa: B027 (a hook: nothing by default)
        """Host bookkeeping after each step (the update counter, target networks)."""

    def learn(self, batch: Batch) -> None:
        self.metrics.add(self.runner(to_device(batch, self.device)))
        self.after_step()

    def read_metrics(self) -> dict[str, float]:
        return self.metrics.read()

    def state_loaded(self) -> None:
        """Called by ``load_state``: a captured update is captured again."""
        self.runner.reset()

    def update(self, batch: Batch) -> dict[str, float]:
        self.learn(batch)
        return self.read_metrics()
