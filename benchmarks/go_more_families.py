"""Import more model families for GO's pre-training: Hugging Face ``transformers`` architectures.

GO's transfer rests on pre-training over many graphs (Zhou et al., NeurIPS 2020); the suite has
six families, so a leave-one-family-out pre-training sees five kinds of graph, and seeded
variants of the same five did not move zero-shot beyond seed noise (docs/graphopt-transfer.md,
"More graphs per family"). This script imports training steps of other architectures, built
from their ``transformers`` configurations (random weights, no download, dropout 0), with
``from_torch(..., tracer="export")``, at sizes near the suite's smallest graphs (about 0.5-5k
ops; language models with the suite's 32,000-token vocabulary), and writes each as a ``.npz``
graph for ``benchmarks/go_transfer.py --pretrain-extra DIR``. ResNet is left out: it is one of
the suite's six families, and a held-out family must stay unseen.

Needs the ``hf`` extra (``pip install -e .[hf]``). Resumable: graphs already written are kept.
Run::

    .venv/bin/python benchmarks/go_more_families.py [--only NAME ...]

It prints a table and writes ``benchmarks/results/go_more_families/graphs/<name>.npz`` and
``benchmarks/results/go_more_families/manifest.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from actorq.graphopt.cluster import get_cluster
from actorq.graphopt.importer import from_torch
from actorq.graphopt.ir import load_graph
from actorq.graphopt.simulator import simulate
from graphopt_import_check import Loss  # a training step's forward: the loss

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "go_more_families"
V = 32000  # the suite's language-model vocabulary
TOKENS, TOKEN_BATCH = 128, 16  # transformer LMs: txl-s's segment length and batch
IMAGES = 32  # vision models: the suite's CNN batch, 224 x 224


def _ids(batch: int, length: int) -> torch.Tensor:
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(0))


def causal_lm(model: nn.Module, batch: int = TOKEN_BATCH, length: int = TOKENS) -> Any:
    return Loss(model, lambda m, x: m(input_ids=x, labels=x).loss), [_ids(batch, length)]


def seq2seq(model: nn.Module) -> Any:
    x = _ids(TOKEN_BATCH, TOKENS)
    return Loss(model, lambda m, x, y: m(input_ids=x, labels=y).loss), [x, x]


def image_classifier(model: nn.Module, batch: int = IMAGES) -> Any:
    g = torch.Generator().manual_seed(0)
    img = torch.randn(batch, 3, 224, 224, generator=g)
    lab = torch.randint(0, 10, (batch,), generator=g)
    return Loss(model, lambda m, x, y: m(pixel_values=x, labels=y).loss), [img, lab]


def audio_classifier(model: nn.Module, batch: int = 8) -> Any:
    g = torch.Generator().manual_seed(0)
    wav = torch.randn(batch, 16000, generator=g)  # 1 s at 16 kHz, like wavenet-s
    lab = torch.randint(0, 10, (batch,), generator=g)
    return Loss(model, lambda m, x, y: m(input_values=x, labels=y).loss), [wav, lab]


def _text(d: int = 512, heads: int = 8, ff: int = 2048) -> dict[str, Any]:
    return {"vocab_size": V, "d": d, "heads": heads, "ff": ff}


def models() -> dict[str, tuple[str, Callable[[], Any]]]:
    """name -> (a one-line description, a builder of (loss module, example inputs))."""
    import transformers as tf

    t = _text()
    drop = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    return {
        "gpt2": ("GPT-2, 6 layers, d 512, 16 x 128 tokens", lambda: causal_lm(tf.GPT2LMHeadModel(
            tf.GPT2Config(n_layer=6, n_embd=t["d"], n_head=t["heads"], vocab_size=V,
                          resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, use_cache=False)))),
        "llama": ("Llama, 6 layers, d 512, SwiGLU 1376, 16 x 128 tokens", lambda: causal_lm(
            tf.LlamaForCausalLM(tf.LlamaConfig(
                num_hidden_layers=6, hidden_size=t["d"], num_attention_heads=t["heads"],
                num_key_value_heads=t["heads"], intermediate_size=1376, vocab_size=V,
                use_cache=False)))),
        "opt": ("OPT, 6 layers, d 512, 16 x 128 tokens", lambda: causal_lm(tf.OPTForCausalLM(
            tf.OPTConfig(num_hidden_layers=6, hidden_size=t["d"], num_attention_heads=t["heads"],
                         ffn_dim=t["ff"], vocab_size=V, dropout=0, attention_dropout=0,
                         use_cache=False)))),
        "mixtral": ("Mixtral (mixture of 4 experts, top 2), 2 layers, d 512, 16 x 128 tokens",
                    lambda: causal_lm(tf.MixtralForCausalLM(tf.MixtralConfig(
                        num_hidden_layers=2, hidden_size=t["d"], num_attention_heads=t["heads"],
                        num_key_value_heads=t["heads"], intermediate_size=1024,
                        num_local_experts=4, vocab_size=V, use_cache=False)))),
        "gpt-neo": ("GPT-Neo (global and local attention layers), 4 layers, d 512, 16 x 128 "
                    "tokens", lambda: causal_lm(tf.GPTNeoForCausalLM(tf.GPTNeoConfig(
                        num_layers=4, attention_types=[[["global", "local"], 2]],
                        hidden_size=t["d"], num_heads=t["heads"], vocab_size=V, embed_dropout=0,
                        attention_dropout=0, resid_dropout=0, use_cache=False)))),
        "xlnet": ("XLNet (two-stream relative attention), 4 layers, d 512, 16 x 128 tokens",
                  lambda: causal_lm(tf.XLNetLMHeadModel(tf.XLNetConfig(
                      n_layer=4, d_model=t["d"], n_head=t["heads"], d_inner=t["ff"],
                      vocab_size=V, dropout=0, use_mems_train=False)))),
        "funnel": ("Funnel Transformer (pooled blocks 2-2-2), d 512, 16 x 128 tokens", lambda:
                   causal_lm(tf.FunnelForMaskedLM(tf.FunnelConfig(
                       block_sizes=[2, 2, 2], d_model=t["d"], n_head=t["heads"],
                       d_inner=t["ff"], vocab_size=V, hidden_dropout=0, attention_dropout=0,
                       activation_dropout=0)))),
        "bert": ("BERT masked LM, 6 layers, d 512, 16 x 128 tokens", lambda: causal_lm(
            tf.BertForMaskedLM(tf.BertConfig(
                num_hidden_layers=6, hidden_size=t["d"], num_attention_heads=t["heads"],
                intermediate_size=t["ff"], vocab_size=V, **drop)))),
        "albert": ("ALBERT masked LM (one layer's weights shared by 6), d 512, 16 x 128 tokens",
                   lambda: causal_lm(tf.AlbertForMaskedLM(tf.AlbertConfig(
                       num_hidden_layers=6, hidden_size=t["d"], num_attention_heads=t["heads"],
                       intermediate_size=t["ff"], vocab_size=V, **drop)))),
        "t5": ("T5, 3 + 3 layers, d 512, 16 x (128 + 128) tokens", lambda: seq2seq(
            tf.T5ForConditionalGeneration(tf.T5Config(
                d_model=t["d"], d_ff=t["ff"], num_layers=3, num_heads=t["heads"], vocab_size=V,
                dropout_rate=0, use_cache=False, decoder_start_token_id=0, pad_token_id=0)))),
        "bart": ("BART, 3 + 3 layers, d 512, 16 x (128 + 128) tokens", lambda: seq2seq(
            tf.BartForConditionalGeneration(tf.BartConfig(
                encoder_layers=3, decoder_layers=3, d_model=t["d"], encoder_attention_heads=8,
                decoder_attention_heads=8, encoder_ffn_dim=t["ff"], decoder_ffn_dim=t["ff"],
                vocab_size=V, dropout=0, attention_dropout=0, activation_dropout=0,
                use_cache=False)))),
        "mamba": ("Mamba (selective state space, sequential scan), 2 layers, d 512, 32 x 24 "
                  "tokens", lambda: causal_lm(tf.MambaForCausalLM(tf.MambaConfig(
                      num_hidden_layers=2, hidden_size=512, vocab_size=V, use_cache=False)),
                      batch=32, length=24)),
        "rwkv": ("RWKV (linear-attention RNN), 2 layers, d 512, 32 x 16 tokens", lambda: causal_lm(
            tf.RwkvForCausalLM(tf.RwkvConfig(num_hidden_layers=2, hidden_size=512, vocab_size=V,
                                             use_cache=False)), batch=32, length=16)),
        "vit": ("ViT, 6 layers, d 768, 32 images", lambda: image_classifier(
            tf.ViTForImageClassification(tf.ViTConfig(num_hidden_layers=6, num_labels=10,
                                                      **drop)))),
        "swin": ("Swin, depths 2-2-2-2, 32 images", lambda: image_classifier(
            tf.SwinForImageClassification(tf.SwinConfig(depths=[2, 2, 2, 2], num_labels=10,
                                                        drop_path_rate=0.0, **drop)))),
        "convnext": ("ConvNeXt, depths 2-2-4-2, 32 images", lambda: image_classifier(
            tf.ConvNextForImageClassification(tf.ConvNextConfig(depths=[2, 2, 4, 2],
                                                                num_labels=10)))),
        "mobilenetv2": ("MobileNetV2, 32 images", lambda: image_classifier(
            tf.MobileNetV2ForImageClassification(tf.MobileNetV2Config(num_labels=10)))),
        "mobilevit": ("MobileViT, 32 images", lambda: image_classifier(
            tf.MobileViTForImageClassification(tf.MobileViTConfig(
                num_labels=10, classifier_dropout_prob=0.0, **drop)))),
        "poolformer": ("PoolFormer (pooling token mixer), depths 2-2-4-2, 32 images", lambda:
                       image_classifier(tf.PoolFormerForImageClassification(
                           tf.PoolFormerConfig(num_labels=10, depths=[2, 2, 4, 2])))),
        "segformer": ("SegFormer encoder (MiT-b0) classifier, 32 images", lambda:
                      image_classifier(tf.SegformerForImageClassification(tf.SegformerConfig(
                          num_labels=10, classifier_dropout_prob=0.0, drop_path_rate=0.0,
                          **drop)))),
        "levit": ("LeViT (convolutional stem, attention with shrinking resolution), 32 images",
                  lambda: image_classifier(tf.LevitForImageClassification(
                      tf.LevitConfig(num_labels=10)))),
        "regnet": ("RegNet (Y-040 widths), 32 images", lambda: image_classifier(
            tf.RegNetForImageClassification(tf.RegNetConfig(num_labels=10)))),
        "efficientnet": ("EfficientNet-B0, 32 images", lambda: image_classifier(
            tf.EfficientNetForImageClassification(tf.EfficientNetConfig(
                num_labels=10, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280,
                image_size=224, dropout_rate=0.0,
                drop_connect_rate=0.0)))),
        "wav2vec2": ("wav2vec 2.0 classifier (conv feature encoder + 4 layers), 8 x 1 s of "
                     "16 kHz", lambda: audio_classifier(
                         tf.Wav2Vec2ForSequenceClassification(tf.Wav2Vec2Config(
                             num_hidden_layers=4, num_labels=10, hidden_dropout=0.0,
                             attention_dropout=0.0, activation_dropout=0.0,
                             feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0)))),
    }  # fmt: skip


def relatives() -> dict[str, tuple[str, Callable[[], Any]]]:
    """Close relatives of the architectures the shipped policies place worst (Mamba, Swin),
    kept apart from :func:`models` (``--set relatives``, their own folder) so that the 24
    graphs every committed ``--pretrain-extra`` run used stay as they are."""
    import transformers as tf

    drop = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    return {
        "mamba2": ("Mamba-2 (state space duality, chunked scan), 2 layers, d 512, 32 x 24 "
                   "tokens", lambda: causal_lm(tf.Mamba2ForCausalLM(tf.Mamba2Config(
                       num_hidden_layers=2, hidden_size=512, num_heads=16, head_dim=64,
                       vocab_size=V, use_cache=False)), batch=32, length=24)),
        "falcon-mamba": ("Falcon-Mamba (Mamba with RMS-normalised B, C, dt), 2 layers, d 512, "
                         "32 x 24 tokens", lambda: causal_lm(tf.FalconMambaForCausalLM(
                             tf.FalconMambaConfig(num_hidden_layers=2, hidden_size=512,
                                                  vocab_size=V, use_cache=False)),
                             batch=32, length=24)),
        "swinv2": ("Swin V2 (cosine attention, log-spaced position bias), depths 2-2-2-2, 32 "
                   "images", lambda: image_classifier(tf.Swinv2ForImageClassification(
                       tf.Swinv2Config(depths=[2, 2, 2, 2], num_labels=10, drop_path_rate=0.0,
                                       **drop)))),
        "focalnet": ("FocalNet (focal modulation in place of attention), depths 2-2-2-2, 32 "
                     "images", lambda: image_classifier(tf.FocalNetForImageClassification(
                         tf.FocalNetConfig(depths=[2, 2, 2, 2], num_labels=10,
                                           drop_path_rate=0.0, hidden_dropout_prob=0.0)))),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME", help="these models only")
    ap.add_argument("--set", choices=("main", "relatives"), default="main",
                    help="main: the 24 architectures (benchmarks/results/go_more_families); "
                    "relatives: Mamba's and Swin's (.../go_more_families/relatives)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None, help="default: the --set's folder")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = OUT if args.set == "main" else OUT / "relatives"
    try:
        import transformers
    except ImportError:
        print("needs the hf extra: pip install -e '.[hf]'", file=sys.stderr)
        return 2
    table = models() if args.set == "main" else relatives()
    names = args.only or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        print(f"unknown model {unknown[0]!r}; models: {', '.join(table)}", file=sys.stderr)
        return 2
    graphs = args.out / "graphs"
    graphs.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    cluster = get_cluster("4xgpu-pcie")
    for name in names:
        note, build = table[name]
        path = graphs / f"{name}.npz"
        if path.is_file() and name in manifest:
            continue
        torch.manual_seed(0)  # the weights are never read, but keep the build repeatable
        t0 = time.perf_counter()
        module, inputs = build()
        g = from_torch(module, inputs, f"hf-{name}", tracer="export",
                       meta={"family": f"hf-{name}", "note": note})  # fmt: skip
        seconds = time.perf_counter() - t0
        g.save(path)
        g = load_graph(path)  # what pre-training reads
        one = simulate(g, cluster, np.zeros(g.num_ops, dtype=np.int64))
        manifest[name] = {
            "note": note,
            "ops": g.num_ops,
            "gflops": float(g.flops.sum()) / 1e9,
            "param_mb": float(g.param_bytes.sum()) / 1e6,
            "single_gpu_ms_4xgpu_pcie": 1e3 * one.step_time,
            "import_s": seconds,
            "file_kb": path.stat().st_size / 1e3,
        }
        manifest["_versions"] = {"transformers": transformers.__version__,
                                 "torch": torch.__version__}  # fmt: skip
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {g.num_ops} ops, {seconds:.0f} s", flush=True)
    print("| model | ops | GFLOPs | params MB | one GPU (4xgpu-pcie) ms | what |")
    print("|---|---:|---:|---:|---:|---|")
    for name in table:
        if name in manifest:
            m = manifest[name]
            print(f"| {name} | {m['ops']:,} | {m['gflops']:.0f} | {m['param_mb']:.0f} | "
                  f"{m['single_gpu_ms_4xgpu_pcie']:.1f} | {m['note']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
