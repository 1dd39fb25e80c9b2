"""Check the graphopt importer's cost model on Hugging Face models built from their configs.

For GPT-2, BERT, T5-small, ViT and ResNet-50 (transformers configs, random weights, no download;
dropout set to 0 so that eager and traced runs keep the same tensors) this imports the training
step (a wrapper returning the loss) with ``tracer="export"`` and compares it with the real thing:

* **FLOPs**: the IR's forward + backward FLOPs of the ops with a FLOP formula (matmuls,
  convolutions, attention: elementwise ops and optimizer updates left out, since
  ``torch.utils.flop_counter.FlopCounterMode`` counts only those) against ``FlopCounterMode`` on an
  actual forward and backward on CPU, before the cost-model fix (the importer at ``--before``, a
  git revision) and after it (this working tree).
* **activation memory**: the bytes autograd saves for the backward, measured on the eager run
  with ``torch.autograd.graph.saved_tensors_hooks`` (unique storages, parameters and buffers
  excluded), against the IR's ``meta["saved_activation_bytes"]``, and the simulated peak of live
  activations on one device (peak memory minus parameter, gradient and optimizer bytes) before
  and after.

Sizes: batch 2; sequences of 128 tokens (T5: 128 encoder + 128 decoder tokens); images 224 x 224.
Needs the ``hf`` extra (``pip install -e .[hf]``). Run::

    .venv/bin/python benchmarks/graphopt_import_check.py

It prints a table and writes ``benchmarks/results/graphopt_import_check.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from actorq.graphopt import importer
from actorq.graphopt.cluster import get_cluster
from actorq.graphopt.ir import Graph
from actorq.graphopt.simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "graphopt_import_check.json"
BEFORE = "73f9e76"  # the last commit with the old cost model
BATCH, SEQ, PX = 2, 128, 224


class Loss(nn.Module):
    """A training step's forward: the model's loss from its inputs."""

    def __init__(self, model: nn.Module, call: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.model, self.call = model, call

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.call(self.model, *xs)


def build(name: str) -> tuple[nn.Module, list[torch.Tensor]]:
    import transformers as tf

    cfg: Any  # one config class per model
    m: nn.Module
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (BATCH, SEQ), generator=g)
    img = torch.randn(BATCH, 3, PX, PX, generator=g)
    lab = torch.randint(0, 10, (BATCH,), generator=g)
    if name == "gpt2":
        cfg = tf.GPT2Config(resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, use_cache=False)
        m = tf.GPT2LMHeadModel(cfg)
        return Loss(m, lambda m, x: m(input_ids=x, labels=x, use_cache=False).loss), [ids]
    if name == "bert":
        cfg = tf.BertConfig(hidden_dropout_prob=0, attention_probs_dropout_prob=0)
        m = tf.BertForMaskedLM(cfg)
        return Loss(m, lambda m, x: m(input_ids=x, labels=x).loss), [ids]
    if name == "t5-small":
        cfg = tf.T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, dropout_rate=0)
        cfg.use_cache, cfg.decoder_start_token_id, cfg.pad_token_id = False, 0, 0
        m = tf.T5ForConditionalGeneration(cfg)
        return Loss(m, lambda m, x, y: m(input_ids=x, labels=y, use_cache=False).loss), [ids, ids]
    if name == "vit":
        cfg = tf.ViTConfig()
        cfg.num_labels = 10
        m = tf.ViTForImageClassification(cfg)
        return Loss(m, lambda m, x, y: m(pixel_values=x, labels=y).loss), [img, lab]
    if name == "resnet-50":
        cfg = tf.ResNetConfig()  # the defaults are ResNet-50
        cfg.num_labels = 10
        m = tf.ResNetForImageClassification(cfg)
        return Loss(m, lambda m, x, y: m(pixel_values=x, labels=y).loss), [img, lab]
    raise ValueError(name)


def _attention_mapping() -> dict[Any, Callable[..., int]]:
    """FlopCounterMode formulas for torch's CPU flash-attention kernel, which its registry lacks
    (it counts the CUDA kernels'): the same sdpa formulas."""
    aten = torch.ops.aten

    # FlopCounterMode hands custom formulas shapes, not tensors
    def fwd(q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> int:
        return int(sdpa_flop_count(q, k, v))

    def bwd(go: Any, q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> int:
        return int(sdpa_backward_flop_count(go, q, k, v))

    return {
        aten._scaled_dot_product_flash_attention_for_cpu: fwd,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: bwd,
    }


def eager(model: nn.Module, inputs: list[torch.Tensor]) -> dict[str, float]:
    """FLOPs (FlopCounterMode) and saved-tensor bytes of one real forward and backward."""
    model.train()
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t

    counter = FlopCounterMode(display=False, custom_mapping=_attention_mapping())
    with counter:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(*inputs)
        loss.backward()
    return {"flops": float(counter.get_total_flops()), "saved_bytes": float(sum(seen.values()))}


@contextlib.contextmanager
def formula_flops_only(mod: ModuleType) -> Iterator[None]:
    """Make an importer count only the ops with a FLOP formula (what FlopCounterMode counts)."""
    ns = vars(mod)  # the importer's globals: its counter looks _aten_flops up there at call time
    original = ns["_aten_flops"]
    has_sdpa = "_sdpa_flops" in ns

    def only(func: Any, args: Any, kwargs: Any, out: Any) -> float:
        packet = func._overloadpacket
        if packet in ns["flop_registry"] or (
            has_sdpa and ns["_sdpa_flops"](func, args) is not None
        ):
            return float(original(func, args, kwargs, out))
        return 0.0

    ns["_aten_flops"] = only
    try:
        yield
    finally:
        ns["_aten_flops"] = original


def old_importer(rev: str) -> ModuleType:
    """The importer as it was at git revision ``rev``, loaded as its own module."""
    src = subprocess.run(
        ["git", "show", f"{rev}:src/actorq/graphopt/importer.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "importer_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("importer_before", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def ir_numbers(mod: ModuleType, model: nn.Module, inputs: list[torch.Tensor]) -> dict[str, float]:
    t0 = time.perf_counter()
    g: Graph = mod.from_torch(model, inputs, "m", tracer="export")
    secs = time.perf_counter() - t0
    with formula_flops_only(mod):
        f = mod.from_torch(model, inputs, "m", tracer="export")
    upd = np.array([t == "update" for t in f.op_types])
    r = simulate(g, get_cluster("1xh100"), np.zeros(g.num_ops, dtype=np.int64))
    resident = float(g.param_bytes.sum())  # weights, buffers, gradient buffers, momentum
    return {
        "ops": g.num_ops,
        "import_s": secs,
        "flops_total": float(g.flops.sum()),
        "flops_formula": float(f.flops[~upd].sum()),
        "saved_bytes": float(g.meta.get("saved_activation_bytes", float("nan"))),
        "sim_peak_activation_bytes": float(r.peak_memory[0]) - resident,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="*", default=["gpt2", "bert", "t5-small", "vit", "resnet-50"])
    p.add_argument("--before", default=BEFORE, help="git revision of the old importer")
    args = p.parse_args()
    torch.manual_seed(0)
    before = old_importer(args.before)
    rows = []
    for name in args.models:
        model, inputs = build(name)
        ref = eager(model, inputs)
        old = ir_numbers(before, model, inputs)
        new = ir_numbers(importer, model, inputs)
        rows.append({"model": name, "eager": ref, "before": old, "after": new})
        print(f"{name}: done ({new['ops']} ops, import {new['import_s']:.1f} s)", file=sys.stderr)
    mb = 2**20
    head = (
        f"{'model':10} {'eager GFLOP':>11} {'IR before':>10} {'IR after':>9} "
        f"{'saved MB':>9} {'IR saved':>9} {'peak before':>11} {'peak after':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        e, b, a = r["eager"], r["before"], r["after"]
        print(
            f"{r['model']:10} {e['flops'] / 1e9:11.1f} {b['flops_formula'] / e['flops']:9.3f}x "
            f"{a['flops_formula'] / e['flops']:8.3f}x {e['saved_bytes'] / mb:9.1f} "
            f"{a['saved_bytes'] / e['saved_bytes']:8.3f}x "
            f"{b['sim_peak_activation_bytes'] / e['saved_bytes']:10.2f}x "
            f"{a['sim_peak_activation_bytes'] / e['saved_bytes']:9.2f}x"
        )
    print(
        "IR FLOPs: forward + backward ops with a FLOP formula, as a ratio to FlopCounterMode on "
        "the eager step; IR saved: meta['saved_activation_bytes'] / eager saved-tensor bytes; "
        "peak: simulated peak live activations on one device / eager saved-tensor bytes"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": "python benchmarks/graphopt_import_check.py",
        "batch": BATCH,
        "seq": SEQ,
        "image": PX,
        "before": args.before,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
    }
    OUT.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
