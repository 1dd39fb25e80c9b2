"""The built-in graph suite: six model families at several sizes, ~1k to >80k ops.

Every graph is a training step (forward, mirrored backward, optimizer updates; see
:mod:`actorq.graphopt.importer`) of a model in :mod:`actorq.graphopt.models`, traced on meta
tensors. Sizes vary depth, sequence length (unrolled steps) and batch, the knobs behind the size of
GO's graphs (Zhou et al., NeurIPS 2020). Graphs over a few thousand ops take seconds to trace, so
they are cached as ``.npz`` (the safe IR format) under ``$ACTORQ_CACHE`` or
``~/.cache/actorq/graphopt``, keyed by name and :data:`SUITE_VERSION`.

:func:`get_graph` also accepts ``<family>-v<seed>`` (a seeded variant of a family, see
:func:`variant`), ``synthetic-<ops>-s<seed>`` (a seeded layered DAG, see
:mod:`actorq.graphopt.synthetic`) and a path to a ``.json``/``.npz`` graph file.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actorq.errors import GraphError, shown
from actorq.graphopt.files import short
from actorq.graphopt.ir import Graph, load_graph
from actorq.inputs import is_file

#: Bump when the importer or a model changes, so stale cached graphs are not reused.
SUITE_VERSION = 6


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    family: str
    config: dict[str, Any]
    """Constructor arguments of the model."""
    inputs: tuple[tuple[tuple[int, ...], str], ...]
    """Example input shapes and dtypes (``"long"`` tokens or ``"float"``)."""
    note: str


def _e(name: str, family: str, note: str, inputs: Any, **config: Any) -> Entry:
    return Entry(name, family, config, tuple((tuple(s), d) for s, d in inputs), note)


def _tok(*shape: int) -> tuple[tuple[int, ...], str]:
    return shape, "long"


def _img(*shape: int) -> tuple[tuple[int, ...], str]:
    return shape, "float"


V = 32000  # vocabulary of the language models
_ENTRIES: list[Entry] = []
# Inception-v3-style CNN: blocks, width, batch, image side
for size, (blocks, width, batch, px) in {
    "s": (16, 32, 32, 224), "m": (32, 48, 64, 224), "l": (64, 64, 32, 299),
}.items():  # fmt: skip
    _ENTRIES.append(_e(
        f"inception-{size}", "inception", f"{blocks} blocks, width {width}, batch {batch}, {px}px",
        [_img(batch, 3, px, px)], blocks=blocks, width=width,
    ))  # fmt: skip
# ResNet: bottleneck blocks per stage, batch
for name, stages, batch in (
    ("resnet-152", (3, 8, 36, 3), 32), ("resnet-200", (3, 24, 36, 3), 64),
    ("resnet-600", (3, 40, 150, 3), 32),
):  # fmt: skip
    _ENTRIES.append(_e(
        name, "resnet", f"bottlenecks {stages}, batch {batch}", [_img(batch, 3, 224, 224)],
        stages=stages,
    ))  # fmt: skip
# GNMT-style seq2seq: layers (encoder = decoder), hidden, length (source = target), batch
for size, (layers, hidden, length, batch) in {
    "s": (2, 512, 10, 64), "m": (4, 1024, 25, 128), "l": (8, 1024, 40, 128),
    "xl": (8, 1024, 80, 128),
}.items():  # fmt: skip
    _ENTRIES.append(_e(
        f"gnmt-{size}", "gnmt", f"{layers}+{layers} layers, hidden {hidden}, length "
        f"{length}+{length}, batch {batch}", [_tok(batch, length), _tok(batch, length)],
        layers=layers, hidden=hidden, vocab=V, src_len=length, tgt_len=length,
    ))  # fmt: skip
# Transformer-XL-style LM: layers, model width, heads, segments of 256 (or 128) tokens, batch
for size, (layers, d, heads, segs, seg_len, batch) in {
    "s": (8, 512, 8, 2, 128, 16), "m": (16, 512, 8, 4, 256, 16),
    "l": (24, 1024, 16, 12, 256, 2), "xl": (36, 1024, 16, 36, 256, 1),
}.items():  # fmt: skip
    _ENTRIES.append(_e(
        f"txl-{size}", "transformer-xl", f"{layers} layers, d {d}, {segs} segments of "
        f"{seg_len}, batch {batch}", [_tok(batch, segs, seg_len)],
        layers=layers, d=d, heads=heads, vocab=V, segments=segs,
    ))  # fmt: skip
# WaveNet: stacks of 10 dilated layers, channels, skip channels, batch of 1 s at 16 kHz
for size, (stacks, ch, skip, batch) in {
    "s": (4, 64, 128, 4), "m": (10, 128, 256, 2), "l": (30, 128, 256, 1),
}.items():  # fmt: skip
    _ENTRIES.append(_e(
        f"wavenet-{size}", "wavenet", f"{stacks} stacks x 10 layers, {ch} channels, 1 s of "
        f"16 kHz, batch {batch}", [_img(batch, 1, 16000)],
        stacks=stacks, layers_per_stack=10, channels=ch, skip=skip,
    ))  # fmt: skip
# RNNLM: layers, hidden, unrolled steps, batch
for size, (layers, hidden, steps, batch) in {
    "s": (2, 1024, 40, 64), "m": (4, 1024, 100, 64), "l": (4, 2048, 300, 64),
    "xl": (4, 1024, 750, 64), "xxl": (8, 1024, 500, 32),
}.items():  # fmt: skip
    _ENTRIES.append(_e(
        f"rnnlm-{size}", "rnnlm", f"{layers} layers, hidden {hidden}, {steps} steps, batch "
        f"{batch}", [_tok(batch, steps)], layers=layers, hidden=hidden, vocab=V, steps=steps,
    ))  # fmt: skip
SUITE: dict[str, Entry] = {e.name: e for e in _ENTRIES}

#: Graph-name prefix of each family (``<prefix>-v<seed>`` names a seeded variant).
PREFIX = {
    "inception": "inception", "resnet": "resnet", "gnmt": "gnmt", "transformer-xl": "txl",
    "wavenet": "wavenet", "rnnlm": "rnnlm",
}  # fmt: skip
MAX_VARIANT_SEED = 10**6


def variant(family: str, seed: int) -> Entry:
    """A seeded variant of ``family``: its model with depth, width, length and batch drawn
    around the suite's smallest graph (about 0.25-2.5x its ops), named ``<prefix>-v<seed>``.

    Pre-training on many graphs per family is what GO's transfer rests on (Zhou et al.,
    NeurIPS 2020, pre-train on a set of graphs, zero-shot on unseen ones); the suite's sizes
    alone give one small graph per family, and a policy that imitates five graphs' splits fits
    those five rather than a rule (`git show 67fd709:docs/graphopt-transfer.md`, "What zero-shot
    transfers"). The draws depend on ``(family, seed)`` only, so a name always means the same
    graph.
    """
    if family not in PREFIX:
        raise GraphError(f"unknown family {family!r}; families: {', '.join(PREFIX)}")
    if not 0 <= seed <= MAX_VARIANT_SEED:
        raise GraphError(f"variant seed {seed}: want 0..{MAX_VARIANT_SEED:,}")
    import numpy as np

    rng = np.random.default_rng([list(PREFIX).index(family), seed])

    def pick(*xs: int) -> int:
        return int(xs[rng.integers(len(xs))])

    name = f"{PREFIX[family]}-v{seed}"
    if family == "inception":
        blocks, width, batch = pick(6, 8, 12, 16, 20), pick(16, 24, 32, 48), pick(16, 32, 64)
        return _e(
            name, family, f"{blocks} blocks, width {width}, batch {batch}, 224px",
            [_img(batch, 3, 224, 224)], blocks=blocks, width=width,
        )  # fmt: skip
    if family == "resnet":
        stages, batch = (
            (pick(2, 3), pick(2, 4, 8), pick(4, 8, 16, 24), pick(2, 3)),
            pick(16, 32, 64),
        )
        return _e(
            name, family, f"bottlenecks {stages}, batch {batch}", [_img(batch, 3, 224, 224)],
            stages=stages,
        )  # fmt: skip
    if family == "gnmt":
        layers, hidden = pick(1, 2, 3), pick(256, 512, 1024)
        length, batch = pick(6, 8, 10, 14), pick(32, 64, 128)
        return _e(
            name, family, f"{layers}+{layers} layers, hidden {hidden}, length {length}+{length}"
            f", batch {batch}", [_tok(batch, length), _tok(batch, length)],
            layers=layers, hidden=hidden, vocab=V, src_len=length, tgt_len=length,
        )  # fmt: skip
    if family == "transformer-xl":
        layers, d, segs = pick(4, 6, 8, 12), pick(256, 512, 768), pick(1, 2, 3)
        seg_len, batch = pick(64, 128, 256), pick(4, 8, 16, 32)
        return _e(
            name, family, f"{layers} layers, d {d}, {segs} segments of {seg_len}, batch {batch}",
            [_tok(batch, segs, seg_len)], layers=layers, d=d, heads=8, vocab=V, segments=segs,
        )  # fmt: skip
    if family == "wavenet":
        stacks, ch, batch = pick(2, 3, 4, 5), pick(32, 64, 128), pick(2, 4, 8)
        return _e(
            name, family, f"{stacks} stacks x 10 layers, {ch} channels, 1 s of 16 kHz, batch "
            f"{batch}", [_img(batch, 1, 16000)],
            stacks=stacks, layers_per_stack=10, channels=ch, skip=2 * ch,
        )  # fmt: skip
    layers, hidden = pick(1, 2, 3), pick(512, 1024, 2048)
    steps, batch = pick(12, 20, 30, 40), pick(32, 64, 128)
    return _e(
        name, "rnnlm", f"{layers} layers, hidden {hidden}, {steps} steps, batch {batch}",
        [_tok(batch, steps)], layers=layers, hidden=hidden, vocab=V, steps=steps,
    )  # fmt: skip


_VARIANT = re.compile(r"(" + "|".join(PREFIX.values()) + r")-v(0|[1-9]\d{0,6})")  # canonical seeds


def _variant_entry(name: str) -> Entry | None:
    m = _VARIANT.fullmatch(name)
    if m is None:
        return None
    family = next(f for f, p in PREFIX.items() if p == m.group(1))
    return variant(family, int(m.group(2)))


def family_of(name: str) -> str | None:
    """The family of a suite graph or a variant name, else None."""
    e = SUITE.get(name) or _variant_entry(name)
    return None if e is None else e.family


#: The graph names besides the suite's, as error messages list them.
OTHER_NAMES = "<family>-v<seed>, synthetic-<ops>-s<seed> or a .json/.npz file"
_SYNTH = re.compile(r"synthetic-(\d+)-s(\d+)")
MAX_SYNTHETIC_OPS = 10_000_000
"""About 100 times the suite's largest graph; a bigger one would only exhaust memory while built."""


def cache_dir() -> Path:
    root = os.environ.get("ACTORQ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "actorq"
    )
    return Path(root) / "graphopt"


def _build(entry: Entry) -> Graph:
    import torch

    from actorq.graphopt import models
    from actorq.graphopt.importer import from_torch

    ctor: Callable[..., torch.nn.Module] = {
        "inception": models.InceptionNet,
        "resnet": models.ResNet,
        "gnmt": models.GNMT,
        "transformer-xl": models.TransformerXL,
        "wavenet": models.WaveNet,
        "rnnlm": models.RNNLM,
    }[entry.family]
    with torch.device("meta"):
        module = ctor(**entry.config)
        inputs = [
            torch.zeros(s, dtype=torch.long if d == "long" else torch.float32)
            for s, d in entry.inputs
        ]
    meta = {"family": entry.family, "note": entry.note}
    return from_torch(module, inputs, entry.name, training=True, meta=meta)


def synthetic_ops(name: str) -> int | None:
    """The op count a ``synthetic-<ops>-s<seed>`` name asks for (None for other names), known
    before the graph is generated."""
    m = _SYNTH.fullmatch(name)
    return int(m.group(1)) if m and len(m.group(1)) <= 9 else None


def get_graph(name: str, *, cache: bool = True) -> Graph:
    """A suite graph by name, ``synthetic-<ops>-s<seed>``, or a ``.json``/``.npz`` file path."""
    m = _SYNTH.fullmatch(name)
    if m:
        from actorq.graphopt.synthetic import layered_dag

        ops, seed = m.group(1), m.group(2)
        # length first: int() refuses thousands of digits with a ValueError
        if len(ops) > 9 or int(ops) > MAX_SYNTHETIC_OPS:
            raise GraphError(f"graph {short(name)}: at most {MAX_SYNTHETIC_OPS:,} ops")
        if len(seed) > 19:
            raise GraphError(f"graph {short(name)}: a seed has at most 19 digits")
        return layered_dag(int(ops), int(seed))
    entry = SUITE.get(name) or _variant_entry(name)
    if entry is not None:
        path = cache_dir() / f"{name}-v{SUITE_VERSION}.npz"
        if cache and path.is_file():
            try:
                return load_graph(path)
            except GraphError:
                pass  # a corrupt cache entry: rebuild it
        g = _build(entry)
        if cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            g.save(path)
        return g
    if name.endswith((".json", ".npz")):
        return load_graph(name)
    close = [k for k in SUITE if k.split("-")[0] == name.split("-")[0]]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise GraphError(
        f"unknown graph {name!r}{hint} (see `actorq graphopt list`; also {OTHER_NAMES})"
    )


def is_graph_name(name: str) -> bool:
    """Whether :func:`get_graph` would accept ``name`` (files: that they exist)."""
    if name in SUITE or _SYNTH.fullmatch(name):
        return True
    if _VARIANT.fullmatch(name):
        return int(name.rsplit("-v", 1)[1]) <= MAX_VARIANT_SEED
    return name.endswith((".json", ".npz")) and is_file(name, f"graph {shown(name)}", GraphError)


def suite_names(family: str | None = None) -> list[str]:
    return [k for k, e in SUITE.items() if family is None or e.family == family]
