"""Probe (archived after one run): why Breakout's int8 actors take fp32's action on < 99% of
the policy's own states, and what calibration choices change it.

    PYTHONPATH=<envpool>:src .venv/bin/python benchmarks/probes/atari_agreement.py RUN

RUN: a finished Atari cell's config.json + checkpoint/. States: 12,800 from 8 envs on the
training settings (episodic life, clipped rewards), every second step of 3,300 after 100
warm-up steps, actions sampled from the fp32 policy, shuffled: 10,240 are measured, the rest
are 256-state calibration draws (a publish calibrates on 256 replay states).
Part 1: real int8 snapshots (onnxruntime), three calibration draws: rounding and calibration
states; the fc layer's output kept in fp32; activation ranges clipped below their maximum
(fixed factors, or per layer the factor that minimizes the logits' squared error on the
calibration states). Part 2: fake quantization in torch on the first 2,048 states, one source
of error at a time (7-bit weights per output channel, uint8 activations at max/255).
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import torch
from onnx import helper

from actorq.agents import pixels as P
from actorq.envs import make_vector_env
from actorq.quant.model_snapshot import ModelSnapshot
from actorq.quant.onnx_builder import MS_DOMAIN, static_scale
from actorq.quant.runtimes import make_runtime
from actorq.run import load_run_policy

torch.set_num_threads(1)
cfg, io, _ = load_run_policy(sys.argv[1], "fp32")
net = io.net
fp32 = P.pixel_snapshot(net, 0, io.spec, io.head, "fp32")
ref_rt = make_runtime(fp32, "ort", 1)

env = make_vector_env(cfg.env, 8, **cfg.env_kwargs())
obs, _ = env.reset(seed=7)
rng = np.random.default_rng(7)
keep = []
for t in range(3300):
    z = ref_rt(obs)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    if t >= 100 and t % 2 == 0:
        keep.append(np.array(obs, copy=True))
    obs, *_ = env.step(np.array([rng.choice(len(q), p=q) for q in p]))
env.close()
states = np.concatenate(keep)
states = states[rng.permutation(len(states))]
ev_all, pool = states[:10240], states[10240:]
ev = ev_all


def run(rt):
    return np.concatenate([rt(ev[i : i + 64]) for i in range(0, len(ev), 64)])


ref = run(ref_rt)
top2 = np.sort(ref, 1)
gap = top2[:, -1] - top2[:, -2]
print(
    f"{len(states)} states; fp32 top-2 logit gap: 1% of states under {np.quantile(gap, 0.01):.4f}"
)


def report(name, out):
    agree = (out.argmax(1) == ref.argmax(1)).mean()
    print(f"  {name:48s} agreement {agree:.2%}  mean |dlogit| {np.abs(out - ref).mean():.4f}")
    return agree


print(f"Part 1: int8 snapshots (onnxruntime), {len(ev):,} states, calibration draws 1-3")


def fp32_fc_body(b, torso, amax, rounded):  # as pixels._int8_body, the fc output left fp32
    x, xs = "obs", 1.0 / 255.0
    for conv, (_, _, stride), a, rw in zip(
        torso.convs, P.NATURE_CONVS, amax, rounded, strict=False
    ):
        ys = static_scale(a)
        x, xs = b.static_conv(x, xs, P.host(conv.weight), P.host(conv.bias), ys, stride, rw), ys
    x = b.op("Flatten", x, axis=1)
    wq, s, bq = b._static_weights(P.host(torso.fc.weight), P.host(torso.fc.bias), xs, rounded[-1])
    y = b.name()
    ins = [x, *b._scale_zero(xs), b.typed(wq), b.typed(s), b.typed(np.zeros(len(s), np.int8))]
    b.nodes.append(helper.make_node("QGemm", [*ins, b.typed(bq)], [y], domain=MS_DOMAIN, transB=1))
    return b.op("Relu", y)


def snapshot(amax, rounded, clip=(1.0,) * 4, fp32_fc=False):
    body = P._int8_body
    if fp32_fc:
        P._int8_body = fp32_fc_body
    try:
        data = P.cnn_onnx(net.torso, net.export_head(), P.MODEL_HEADS[io.head], "", "int8",
                          [a * c for a, c in zip(amax, clip, strict=False)], rounded)  # fmt: skip
    finally:
        P._int8_body = body
    return make_runtime(ModelSnapshot(0, "int8", fp32.kind, data, dict(fp32.meta)), "ort", 1)


hw, hb = (torch.from_numpy(a) for a in net.export_head())
L = [*net.torso.convs, net.torso.fc]
CLIPS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7)


def act_quant(x, amax, clip):
    for j, layer in enumerate(L):
        x = torch.relu(layer(x.flatten(1) if j == 3 else x))
        if amax is not None:
            s = amax[j] * clip[j] / 255
            x = torch.round(x / s).clamp(0, 255) * s
    return x @ hw + hb


def searched_clip(cal, amax):
    """Per layer in turn, the factor whose uint8 activations give the least logit error."""
    x = torch.from_numpy(cal).float() / 255
    target, clip = act_quant(x, None, None), [1.0] * 4
    for j in range(4):
        errs = [float(((act_quant(x, amax, [*clip[:j], c, *clip[j + 1:]]) - target) ** 2).mean())
                for c in CLIPS]  # fmt: skip
        clip[j] = CLIPS[int(np.argmin(errs))]
    return tuple(clip)


rows: dict[str, list[float]] = {}
with torch.no_grad():
    for d in range(3):
        cal = pool[256 * d : 256 * (d + 1)]
        cases = []
        for rounding in ("nearest", "gptq-convs", "gptq"):
            amax, rounded = P.calibrate(net.torso, cal, rounding)
            cases.append((f"{rounding}", snapshot(amax, rounded)))
            if rounding == "gptq-convs":
                cases.append(("gptq-convs, fc output fp32", snapshot(amax, rounded, fp32_fc=True)))
                for name, clip in (("0.9 x max, every layer", (0.9,) * 4),
                                   ("0.85 x max, conv1", (0.85, 1.0, 1.0, 1.0)),
                                   ("searched per layer", searched_clip(cal, amax))):  # fmt: skip
                    cases.append(
                        (f"gptq-convs, ranges {name} {clip}", snapshot(amax, rounded, clip))
                    )
        if d == 0:
            a1024, r1024 = P.calibrate(net.torso, pool[:1024], "gptq-convs")
            cases.append(("gptq-convs, 1,024 calibration states", snapshot(a1024, r1024)))
        for name, rt in cases:
            key = name.split(" (")[0]
            rows.setdefault(key, []).append(report(f"draw {d + 1}: {name}", run(rt)))
print("means over the draws:")
for k, v in rows.items():
    print(f"  {k:48s} {np.mean(v):.2%}  ({', '.join(f'{100 * x:.2f}' for x in v)})")

ev = ev_all[:2048]
ref = run(ref_rt)
print("Part 2: fake quantization (torch), 2,048 states, one source at a time")
x_ev = torch.from_numpy(ev).float() / 255  # the first 2,048 states
x_cal = torch.from_numpy(pool[:256]).float() / 255


def layers_of(torso):
    return [*torso.convs, torso.fc]


def acts(layers, x):
    out = []
    for j, layer in enumerate(layers):
        x = torch.relu(layer(x.flatten(1) if j == 3 else x))
        out.append(x)
    return out


def fwd(layers, x, wq=(), aq=(), amax=None, wbits=7, clip=(1.0,) * 4):
    for j, layer in enumerate(layers):
        x = x.flatten(1) if j == 3 else x
        w = layer.weight
        if j in wq:
            flat, qm = w.reshape(w.shape[0], -1), 2 ** (wbits - 1) - 1
            s = flat.abs().amax(1, keepdim=True) / qm
            w = (torch.round(flat / s).clamp(-qm, qm) * s).reshape(w.shape)
        x = torch.relu(torch.nn.functional.conv2d(x, w, layer.bias, layer.stride) if j < 3
                       else x @ w.T + layer.bias)  # fmt: skip
        if j in aq:
            s = amax[j] * clip[j] / 255
            x = torch.round(x / s).clamp(0, 255) * s
    return x @ hw + hb


with torch.no_grad():
    L = layers_of(net.torso)
    amax = [float(a.max()) for a in acts(L, x_cal)]
    names = ("conv1", "conv2", "conv3", "fc")
    for j in range(4):
        report(f"7-bit weights of {names[j]} only", fwd(L, x_ev, wq=(j,)).numpy())
        report(f"uint8 output of {names[j]} only", fwd(L, x_ev, aq=(j,), amax=amax).numpy())
    report("7-bit weights, every layer", fwd(L, x_ev, wq=range(4)).numpy())
    report("8-bit weights, every layer", fwd(L, x_ev, wq=range(4), wbits=8).numpy())
    report("uint8 activations, every layer", fwd(L, x_ev, aq=range(4), amax=amax).numpy())
    report("7-bit weights + uint8 activations", fwd(L, x_ev, range(4), range(4), amax).numpy())
    report("8-bit weights + uint8 activations",
           fwd(L, x_ev, range(4), range(4), amax, wbits=8).numpy())  # fmt: skip
    for c in (0.9, 0.8, 0.7):
        report(f"uint8 activations clipped at {c} of max",
               fwd(L, x_ev, aq=range(4), amax=amax, clip=(c,) * 4).numpy())  # fmt: skip
    # cross-layer equalization (Nagel et al. 2019): each channel's range scaled to the layer's
    t = copy.deepcopy(net.torso)
    E = layers_of(t)
    for j in range(3):
        a = acts(E, x_cal)[j]
        cmax = a.transpose(0, 1).reshape(a.shape[1], -1).amax(1).clamp_min(1e-6)
        alpha = cmax.max() / cmax
        E[j].weight.mul_(alpha.view(-1, *([1] * (E[j].weight.dim() - 1))))
        E[j].bias.mul_(alpha)
        if j < 2:
            E[j + 1].weight.div_(alpha.view(1, -1, 1, 1))
        else:
            E[j + 1].weight.div_(alpha.repeat_interleave(E[3].weight.shape[1] // len(alpha)))
    eamax = [float(a.max()) for a in acts(E, x_cal)]
    report("equalized: uint8 activations", fwd(E, x_ev, aq=range(4), amax=eamax).numpy())
    report("equalized: 7-bit weights + uint8 activations",
           fwd(E, x_ev, range(4), range(4), eamax).numpy())  # fmt: skip
