"""The suite's model families, as small ``torch.nn.Module`` definitions (no downloads).

Each family mirrors one of GO's workloads (Zhou et al., NeurIPS 2020, Table 1) at the granularity
of a framework graph: convolutions, matmuls, norms and every elementwise op are separate nodes, and
recurrent models are unrolled over time, which is where GO's large graphs come from.

* :class:`InceptionNet` — Inception-v3-style blocks: four parallel branches (1x1; 1x1→3x3;
  1x1→3x3→3x3; pool→1x1) joined by a concat (Szegedy et al., 2016).
* :class:`ResNet` — bottleneck residual blocks (He et al., 2016).
* :class:`GNMT` — seq2seq: LSTM encoder, LSTM decoder with dot-product attention at every step
  (Wu et al., 2016), unrolled over source and target length.
* :class:`TransformerXL` — decoder layers over several segments; each segment attends over the
  previous segment's hidden states (the recurrence memory of Dai et al., 2019).
* :class:`WaveNet` — stacks of dilated causal convolutions with gated activations, residual and
  skip connections (van den Oord et al., 2016).
* :class:`RNNLM` — embedding, stacked LSTMs unrolled over time, a softmax per step (Zaremba et
  al., 2014).

The LSTM cell is written out (two linears, gates, elementwise state update) instead of using
``nn.LSTM``, whose fused kernel would hide the per-step structure a placer and a fuser act on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class InceptionBlock(nn.Module):
    def __init__(self, cin: int, c: int) -> None:
        super().__init__()
        self.b1 = ConvBN(cin, c, 1)
        self.b2 = nn.Sequential(ConvBN(cin, c, 1), ConvBN(c, c, 3))
        self.b3 = nn.Sequential(ConvBN(cin, c, 1), ConvBN(c, c, 3), ConvBN(c, c, 3))
        self.b4 = ConvBN(cin, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = F.avg_pool2d(x, 3, 1, 1)
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(pool)], 1)


class InceptionNet(nn.Module):
    def __init__(self, blocks: int, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            ConvBN(3, 32, 3, 2), ConvBN(32, 64, 3), ConvBN(64, 4 * width, 3, 2)
        )
        layers: list[nn.Module] = []
        c = width
        for i in range(blocks):
            if i and i % max(1, blocks // 3) == 0:  # downsample between stages, like v3's grid
                layers.append(ConvBN(4 * c, 4 * c, 3, 2))
            layers.append(InceptionBlock(4 * c, c))
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(4 * c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return F.log_softmax(self.fc(x.mean((2, 3))), -1)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, c: int, stride: int) -> None:
        super().__init__()
        self.a, self.b = ConvBN(cin, c, 1), ConvBN(c, c, 3, stride)
        self.c = nn.Conv2d(c, 4 * c, 1, bias=False)
        self.bn = nn.BatchNorm2d(4 * c)
        self.down = None if stride == 1 and cin == 4 * c else nn.Conv2d(cin, 4 * c, 1, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.c(self.b(self.a(x))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, stages: tuple[int, ...] = (3, 4, 6, 3), width: int = 64) -> None:
        super().__init__()
        self.stem = ConvBN(3, width, 7, 2)
        layers: list[nn.Module] = []
        cin = width
        for i, n in enumerate(stages):
            c = width * 2**i
            for j in range(n):
                layers.append(Bottleneck(cin, c, 2 if j == 0 and i > 0 else 1))
                cin = 4 * c
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.max_pool2d(self.stem(x), 3, 2, 1))
        return F.log_softmax(self.fc(x.mean((2, 3))), -1)


class LSTMCell(nn.Module):
    """One LSTM step as separate ops: ``gates = Wx x + Wh h``, then the state update."""

    def __init__(self, nin: int, hidden: int) -> None:
        super().__init__()
        self.wx = nn.Linear(nin, 4 * hidden)
        self.wh = nn.Linear(hidden, 4 * hidden, bias=False)

    def forward(
        self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        i, f, g, o = (self.wx(x) + self.wh(h)).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


def _zeros(x: torch.Tensor, hidden: int) -> torch.Tensor:
    return x.new_zeros(x.shape[0], hidden)


def _lstm_stack(
    cells: nn.ModuleList,
    y: torch.Tensor,
    hs: list[torch.Tensor],
    cs: list[torch.Tensor],
    residual_from: int | None = None,
) -> torch.Tensor:
    """One time step through stacked cells (updating ``hs``/``cs`` in place); residual
    connections around the layers from ``residual_from`` on, as in GNMT."""
    for li, cell in enumerate(cells):
        hs[li], cs[li] = cell(y, hs[li], cs[li])
        y = hs[li] + y if residual_from is not None and li >= residual_from else hs[li]
    return y


class RNNLM(nn.Module):
    def __init__(self, layers: int, hidden: int, vocab: int, steps: int) -> None:
        super().__init__()
        self.steps, self.hidden = steps, hidden
        self.emb = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList(LSTMCell(hidden, hidden) for _ in range(layers))
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)  # (batch, steps, hidden)
        hs = [_zeros(x[:, 0], self.hidden) for _ in self.cells]
        cs = list(hs)
        losses = []
        for t in range(self.steps):
            y = _lstm_stack(self.cells, x[:, t], hs, cs)
            losses.append(F.log_softmax(self.out(y), -1).amax(-1))
        return torch.stack(losses).mean()


class GNMT(nn.Module):
    def __init__(self, layers: int, hidden: int, vocab: int, src_len: int, tgt_len: int) -> None:
        super().__init__()
        self.hidden, self.src_len, self.tgt_len = hidden, src_len, tgt_len
        self.src_emb = nn.Embedding(vocab, hidden)
        self.tgt_emb = nn.Embedding(vocab, hidden)
        self.enc = nn.ModuleList(LSTMCell(hidden, hidden) for _ in range(layers))
        self.dec = nn.ModuleList(
            LSTMCell(2 * hidden if i == 0 else hidden, hidden) for i in range(layers)
        )
        self.out = nn.Linear(hidden, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        xs, ys = self.src_emb(src), self.tgt_emb(tgt)
        hs = [_zeros(xs[:, 0], self.hidden) for _ in self.enc]
        cs = list(hs)
        enc_out = []
        for t in range(self.src_len):
            enc_out.append(_lstm_stack(self.enc, xs[:, t], hs, cs, residual_from=2))
        memory = torch.stack(enc_out, 1)  # (batch, src_len, hidden)
        ctx = _zeros(xs[:, 0], self.hidden)
        losses = []
        for t in range(self.tgt_len):
            y = _lstm_stack(self.dec, torch.cat([ys[:, t], ctx], 1), hs, cs, residual_from=2)
            att = torch.softmax(torch.bmm(memory, y.unsqueeze(2)), 1)  # (batch, src_len, 1)
            ctx = (att * memory).sum(1)
            losses.append(F.log_softmax(self.out(y + ctx), -1).amax(-1))
        return torch.stack(losses).mean()


class XLLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.kv = nn.Linear(d, d), nn.Linear(d, 2 * d)
        self.proj = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        ctx = torch.cat([mem.detach(), x], 1)  # attend over the previous segment too (XL)
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k, v = self.kv(ctx).chunk(2, -1)
        k = k.view(b, -1, h, d // h).transpose(1, 2)
        v = v.view(b, -1, h, d // h).transpose(1, 2)
        att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * (d // h) ** -0.5, -1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = self.ln1(x + self.proj(y))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class TransformerXL(nn.Module):
    def __init__(self, layers: int, d: int, heads: int, vocab: int, segments: int) -> None:
        super().__init__()
        self.segments = segments
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(XLLayer(d, heads) for _ in range(layers))
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # tokens: (batch, segments, seg_len); hidden states of segment s are memory for s + 1
        mems = [self.emb(tokens[:, 0]) for _ in self.layers]
        losses = []
        for s in range(self.segments):
            x = self.emb(tokens[:, s])
            new = []
            for li, layer in enumerate(self.layers):
                new.append(x)
                x = layer(x, mems[li])
            mems = new
            losses.append(F.log_softmax(self.out(x), -1).amax(-1).mean())
        return torch.stack(losses).mean()


class WaveNet(nn.Module):
    def __init__(self, stacks: int, layers_per_stack: int, channels: int, skip: int) -> None:
        super().__init__()
        self.inp = nn.Conv1d(1, channels, 1)
        self.dil = nn.ModuleList()
        self.res = nn.ModuleList()
        self.skp = nn.ModuleList()
        self.dilations = []
        for _ in range(stacks):
            for i in range(layers_per_stack):
                self.dilations.append(2**i)
                self.dil.append(nn.Conv1d(channels, 2 * channels, 2, dilation=2**i))
                self.res.append(nn.Conv1d(channels, channels, 1))
                self.skp.append(nn.Conv1d(channels, skip, 1))
        self.post1, self.post2 = nn.Conv1d(skip, skip, 1), nn.Conv1d(skip, 256, 1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        x = self.inp(audio)
        skips = None
        for dil, res, skp, dl in zip(self.dil, self.res, self.skp, self.dilations, strict=True):
            a, b = dil(F.pad(x, (dl, 0))).chunk(2, 1)  # causal: pad on the left only
            z = torch.tanh(a) * torch.sigmoid(b)
            x = x + res(z)
            skips = skp(z) if skips is None else skips + skp(z)
        assert skips is not None
        return F.log_softmax(self.post2(F.relu(self.post1(F.relu(skips)))), 1).amax(1).mean()
