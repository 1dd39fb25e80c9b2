"""Learner state for checkpoints: torch modules and optimizers as safetensors-ready tensors plus
JSON metadata (never pickled). Shared by every agent's ``Learner.state()/load_state()``."""

from __future__ import annotations

import math
from typing import Any

import torch

from actorq.errors import CheckpointError


def pack(
    modules: dict[str, torch.nn.Module], optimizers: dict[str, torch.optim.Optimizer]
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``({"<module>.<param>": t, "<opt>.<param id>.<state>": t}, {"optimizers": {...}})``.

    A tensor a module holds under several names (SB3's ``CnnPolicy`` shares one feature
    extractor as ``features_extractor``, ``pi_features_extractor`` and ``vf_…``) is stored once,
    under its first name, the others in ``meta["aliases"]`` (safetensors refuses shared memory).
    """
    tensors: dict[str, torch.Tensor] = {}
    first: dict[tuple[Any, ...], str] = {}
    aliases: dict[str, str] = {}
    for name, m in modules.items():
        for k, v in m.state_dict().items():
            key = f"{name}.{k}"
            where = (v.device, v.dtype, v.untyped_storage().data_ptr(), v.storage_offset(),
                     tuple(v.shape), tuple(v.stride()))  # fmt: skip
            if v.numel() and where in first:
                aliases[key] = first[where]
                continue
            first[where] = key
            tensors[key] = v
    meta: dict[str, Any] = {"optimizers": {}, **({"aliases": aliases} if aliases else {})}
    for name, opt in optimizers.items():
        sd = opt.state_dict()
        steps: dict[str, float] = {}
        for pid, st in sd["state"].items():
            for key, val in st.items():
                if key == "step":  # a scalar: JSON, not a tensor
                    steps[str(pid)] = float(val)
                else:
                    tensors[f"{name}.{pid}.{key}"] = val
        # as an eager CPU optimizer would hold them, so a checkpoint loads anywhere: a captured
        # update's tensor learning rate as a number, and not "capturable" (CUDA only)
        groups = [
            {
                **g,
                "lr": float(g["lr"]),
                **({"capturable": False} if "capturable" in g else {}),
            }
            for g in sd["param_groups"]
        ]
        meta["optimizers"][name] = {"steps": steps, "groups": groups}
    return {k: v.detach().cpu().contiguous() for k, v in tensors.items()}, meta


def unpack(
    tensors: dict[str, Any],
    meta: dict[str, Any],
    modules: dict[str, torch.nn.Module],
    optimizers: dict[str, torch.optim.Optimizer],
    device: torch.device,
) -> None:
    """Inverse of :func:`pack`, in place."""
    aliases = meta.get("aliases", {})
    if not isinstance(aliases, dict) or not all(
        isinstance(a, str) and isinstance(c, str) and c in tensors for a, c in aliases.items()
    ):
        raise ValueError("aliases: not a table of names to stored tensors' names")
    tensors = {**tensors, **{a: tensors[c] for a, c in aliases.items()}}

    def sub(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}

    for name, m in modules.items():
        m.load_state_dict(sub(f"{name}."))
    for name, opt in optimizers.items():
        saved = meta["optimizers"][name]
        state: dict[int, dict[str, torch.Tensor]] = {}
        for k, v in sub(f"{name}.").items():
            pid, key = k.split(".", 1)
            state.setdefault(int(pid), {})[key] = v.to(device)
        for pid, step in saved["steps"].items():
            if not _rate(step):
                raise CheckpointError(f"checkpoint optimizer {name!r}: step {step!r:.40} is bad")
            state.setdefault(int(pid), {})["step"] = torch.tensor(step)
        opt.load_state_dict({"state": state, "param_groups": checked_groups(name, saved, opt)})


def checked_groups(name: str, saved: dict[str, Any], opt: torch.optim.Optimizer) -> Any:
    """Optimizer ``name``'s saved parameter groups, checked against ``opt``'s own (a state.json
    edited and resealed: a NaN learning rate trained on NaN, a string beta crashed in torch's
    kernel): as many groups, of the same parameters, no setting ``opt`` lacks (an older
    checkpoint may lack one: torch's default), every number finite and >= 0 but the learning
    rate (betas below 1), flags flags. One :class:`CheckpointError` line naming the setting."""
    groups, now = saved.get("groups"), opt.state_dict()["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(now):
        raise CheckpointError(f"checkpoint optimizer {name!r}: not {len(now)} parameter groups")
    for g, cur in zip(groups, now, strict=True):
        if not isinstance(g, dict) or g.get("params") != cur["params"] or set(g) - set(cur):
            raise CheckpointError(f"checkpoint optimizer {name!r}: groups unlike this run's")
        for k, v in g.items():
            c = cur[k]
            if k == "params":
                continue
            if isinstance(c, bool) or c is None:
                ok = v is None or isinstance(v, bool)
            elif isinstance(c, str):
                ok = isinstance(v, str)
            elif isinstance(c, tuple | list):  # Adam's betas
                ok = (
                    isinstance(v, tuple | list) and len(v) == len(c) and all(_rate(x, 1) for x in v)
                )
            elif k == "lr":  # any finite number: SB3's linear schedule ends a hair below 0
                ok = _rate(v, least=-math.inf)
            else:  # a number
                ok = _rate(v)
            if not ok:
                raise CheckpointError(f"checkpoint optimizer {name!r}: {k} {v!r:.40} is bad")
    return groups


def _rate(v: Any, below: float = math.inf, least: float = 0.0) -> bool:
    """A finite JSON number in [``least``, ``below``) (not a bool)."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and least <= v < below
    return ok and math.isfinite(v)
