"""The macro-placement policy (actorq.agents.ppo.chip_networks): the macro graph, torch vs ONNX at
fp32 and int8 on real observations, masking, training, batching, and Ariane133."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from actorq.agents.ppo.chip_networks import (
    MASKED_LOGIT,
    ChipPolicy,
    ChipPolicyConfig,
    ChipValue,
    chip_policy_onnx,
    macro_graph,
)
from actorq.chip.env import ChipPlacementEnv, random_legal_observations
from actorq.chip.netlist import PORT, SOFT_MACRO, STDCELL, parse_netlist
from actorq.envs import make_env
from tests.chip.synth import node_text, random_netlist_text

SMALL = ("sample_clustered", "toy_macro_stdcell", "macro_tiles_10x10")


def _env(name: str) -> ChipPlacementEnv:
    env = make_env(f"chip:{name}", use_fd=False)  # no FD: the tests never finish an episode
    assert isinstance(env, ChipPlacementEnv)
    return env


def _session(model: ChipPolicy, precision: str) -> ort.InferenceSession:
    """``precision``: fp32, int8 (fp32 convolutions) or int8c (int8 convolutions too)."""
    data = chip_policy_onnx(model, precision[:4], int8_convs=precision == "int8c")
    onnx.checker.check_model(onnx.load_from_string(data))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _torch_logits(model: ChipPolicy, obs: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return np.asarray(model.eval()(torch.from_numpy(obs)).numpy())


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def _legal(env: ChipPlacementEnv, obs: np.ndarray) -> np.ndarray:
    return np.asarray(obs[:, env.layout["mask"]] > 0.5)


def _peaked(model: ChipPolicy) -> ChipPolicy:
    """A random policy with trained-like confident logits (std of a few nats over legal cells)
    and a non-identity FiLM, so int8 errors can show in the distribution: at initialisation the
    output layers are 0.01-scaled and nearly uniform, which would hide them."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        model.out.weight.mul_(3000.0)  # out_gain 0.01 -> an effective gain of 30
        model.decoder.weight.mul_(3000.0)
        for p in model.film.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


# ---- the macro graph ------------------------------------------------------------------------


def _chain_netlist() -> ChipPlacementEnv:
    """M0–M1 share a net, M0–G–M2 meet through soft macro G, M1 drives port P."""
    text = "\n".join(
        [
            *(
                node_text(f"M{i}", type="MACRO", width=5.0, height=5.0, x=10.0, y=10.0)
                for i in range(3)
            ),
            node_text("Grp_0", type="macro", width=20.0, height=20.0, x=10.0, y=10.0),
            node_text("M0/p", ["M1/p"], type="MACRO_PIN", macro_name="M0"),
            node_text("M0/q", ["Grp_0/p"], type="MACRO_PIN", macro_name="M0"),
            node_text("M1/p", type="MACRO_PIN", macro_name="M1"),
            node_text("M1/q", ["P"], type="MACRO_PIN", macro_name="M1"),
            node_text("M2/p", type="MACRO_PIN", macro_name="M2"),
            node_text("Grp_0/p", type="macro_pin", macro_name="Grp_0"),
            node_text("Grp_0/q", ["M2/p"], type="macro_pin", macro_name="Grp_0"),
            node_text("P", type="PORT", side="LEFT", x=0.0, y=3.0),
        ]
    )
    return ChipPlacementEnv(parse_netlist(text), use_fd=False)


def test_macro_graph_links_nets_soft_macros_and_ports() -> None:
    env = _chain_netlist()
    names = [env.netlist.names[i] for i in env.order]
    assert names == ["M0", "M1", "M2"]  # equal areas: file order
    g = macro_graph(env, soft_hop=0.5)
    # raw links: M0–M1 1 (a net), M0–M2 0.5 · 1 · 1 / deg(G) = 0.25 (through G), M1–P 1
    np.testing.assert_allclose(g.adj, np.array([[0, 0.8, 0.2], [1, 0, 0], [1, 0, 0]]), atol=1e-6)
    np.testing.assert_allclose(g.wire, np.array([[0, 0.8, 0.2], [0.5, 0, 0], [1, 0, 0]]), atol=1e-6)
    np.testing.assert_allclose(g.port_w, [0, 0.5, 0], atol=1e-6)
    direct = macro_graph(env, soft_hop=0.0)
    np.testing.assert_allclose(direct.adj, [[0, 1, 0], [1, 0, 0], [0, 0, 0]], atol=1e-6)


def _reference_graph(env: ChipPlacementEnv, soft_hop: float) -> tuple[np.ndarray, np.ndarray]:
    """Dense node × node clique expansion, one net and one pair at a time: the raw macro-macro
    (n, n) and macro-port (n, P) link weights."""
    nl = env.netlist
    a = np.zeros((nl.num_nodes, nl.num_nodes))
    for k in range(nl.num_nets):
        members = np.unique(nl.parent[nl.net_nodes[nl.net_ptr[k] : nl.net_ptr[k + 1]]])
        for i in members:
            for j in members:
                if i != j:
                    a[i, j] += nl.weight[nl.net_driver[k]] / (len(members) - 1)
    soft = np.flatnonzero(np.isin(nl.kind, (SOFT_MACRO, STDCELL)))
    ports = np.flatnonzero(nl.kind == PORT)
    deg = a.sum(axis=1)
    two = (a[:, soft] / np.maximum(deg[soft], 1e-300)) @ a[soft, :]
    full = a + soft_hop * two
    h = env.order
    hh = full[np.ix_(h, h)]
    np.fill_diagonal(hh, 0.0)
    return hh, full[np.ix_(h, ports)]


@pytest.mark.parametrize("seed", range(6))
def test_macro_graph_matches_a_dense_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nl = parse_netlist(random_netlist_text(rng, 200.0, 150.0))
    env = ChipPlacementEnv(nl, use_fd=False)
    g = macro_graph(env, soft_hop=0.7)
    hh, hp = _reference_graph(env, 0.7)
    deg, tot = hh.sum(axis=1), hh.sum(axis=1) + hp.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        adj = np.nan_to_num(hh / deg[:, None])
        wire = np.nan_to_num(hh / tot[:, None])
        port_w = np.nan_to_num(hp.sum(axis=1) / tot)
    np.testing.assert_allclose(g.adj, adj, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.wire, wire, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.port_w, port_w, rtol=1e-5, atol=1e-6)
    assert np.allclose(np.diag(g.adj), 0.0) and np.all(np.isfinite(g.port_x))


def test_wire_map_is_the_mean_manhattan_distance_to_placed_neighbours_and_ports() -> None:
    env = _chain_netlist()
    model = ChipPolicy(env)
    obs, info = env.reset(seed=0)
    a = int(np.flatnonzero(info["action_mask"])[0])
    obs, *_ = env.step(a)  # M0 placed; M1 is next: half its weight on M0, half on port P
    c = env.pc.canvas
    cx, cy = env.cx / c.width, env.cy / c.height
    port = env.netlist.index["P"]
    px, py = env.netlist.x[port] / c.width, env.netlist.y[port] / c.height
    d_m0 = np.abs(cx - cx[a]) + np.abs(cy - cy[a])
    d_port = np.abs(cx - px) + np.abs(cy - py)
    want = (0.5 * d_m0 + 0.5 * d_port) / 2.0
    parts = env.split(obs)
    got = model.encoder.wire_map(
        torch.from_numpy(parts["current"][None]), torch.from_numpy(parts["placed"][None])
    )
    np.testing.assert_allclose(got.numpy().ravel(), want, atol=1e-6)


# ---- torch vs ONNX --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SMALL)
def test_onnx_fp32_matches_torch(name: str) -> None:
    torch.manual_seed(0)
    env = _env(name)
    model = _peaked(ChipPolicy(env))
    obs = np.concatenate([random_legal_observations(env, 12, seed) for seed in (0, 1)])
    want = _torch_logits(model, obs)
    got = _session(model, "fp32").run(["logits"], {"obs": obs})[0]
    assert got.shape == (len(obs), env.rows * env.cols) and got.dtype == np.float32
    legal = _legal(env, obs)
    np.testing.assert_allclose(got[legal], want[legal], rtol=1e-4, atol=1e-4)
    assert np.all(got[~legal] == np.float32(MASKED_LOGIT))
    assert np.all(want[~legal] == np.float32(MASKED_LOGIT))


@pytest.mark.parametrize("precision", ["int8", "int8c"])
@pytest.mark.parametrize("name", ["toy_macro_stdcell", "macro_tiles_10x10"])
def test_int8_is_close_to_fp32(name: str, precision: str) -> None:
    torch.manual_seed(0)
    env = _env(name)
    model = _peaked(ChipPolicy(env))
    obs = np.concatenate([random_legal_observations(env, 25, seed) for seed in (0, 1)])
    fp32 = _session(model, "fp32").run(None, {"obs": obs})[0]
    int8 = _session(model, precision).run(None, {"obs": obs})[0]
    p, q = _softmax(fp32), _softmax(int8)
    assert p.max(axis=1).mean() > 0.2  # the test means something: the policy is confident
    tv = 0.5 * np.abs(p - q).sum(axis=1)
    assert tv.max() < 0.05, tv.max()
    assert np.mean(fp32.argmax(axis=1) == int8.argmax(axis=1)) >= 0.9
    legal = _legal(env, obs)
    assert np.all(int8[~legal] == np.float32(MASKED_LOGIT))
    assert np.abs(int8 - fp32)[legal].max() < 0.25
    sizes = [len(chip_policy_onnx(model, "fp32"))]
    sizes += [len(chip_policy_onnx(model, "int8", int8_convs=c)) for c in (False, True)]
    assert sizes[0] > sizes[1] > sizes[2]


@pytest.mark.parametrize("precision", ["fp32", "int8", "int8c"])
def test_masked_cells_are_never_sampled(precision: str) -> None:
    torch.manual_seed(0)
    env = _env("macro_tiles_10x10")
    model = _peaked(ChipPolicy(env))
    # one macro per cell: state t has t masked cells, thousands over an episode
    obs = random_legal_observations(env, 90, seed=3)
    logits = _session(model, precision).run(None, {"obs": obs})[0]
    legal = _legal(env, obs)
    assert (~legal).sum() > 1000
    assert np.all(_softmax(logits)[~legal] == 0.0)
    dist = torch.distributions.Categorical(logits=torch.from_numpy(logits))
    draws = dist.sample(torch.Size([500])).numpy()  # (500, states)
    assert legal[np.arange(len(obs))[None, :], draws].all()
    # an actor's log-prob and PPO's entropy stay finite next to the masked logits
    assert (
        torch.isfinite(dist.entropy()).all() and torch.isfinite(dist.log_prob(dist.sample())).all()
    )


# ---- training and batching ------------------------------------------------------------------


def test_a_gradient_step_changes_the_logits() -> None:
    torch.manual_seed(0)
    env = _env("toy_macro_stdcell")
    model = ChipPolicy(env)
    obs = torch.from_numpy(random_legal_observations(env, 5))
    legal = obs[:, env.layout["mask"]] > 0.5
    target = torch.stack([torch.nonzero(row)[-1, 0] for row in legal])  # a fixed legal cell
    before = model(obs).detach()

    def loss_fn() -> torch.Tensor:
        d = torch.distributions.Categorical(logits=model(obs))
        return -d.log_prob(target).mean()

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss0 = loss_fn()
    opt.zero_grad()
    loss0.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} gets no gradient"
    opt.step()
    after = model(obs).detach()
    assert not torch.allclose(after[legal], before[legal])
    assert torch.equal(after[~legal], before[~legal])  # masked cells stay masked
    for _ in range(20):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
    assert loss_fn().item() < 0.5 * loss0.item()


def test_value_network() -> None:
    torch.manual_seed(0)
    env = _env("toy_macro_stdcell")
    value = ChipValue(env)
    policy = ChipPolicy(env)
    assert not {id(p) for p in value.parameters()} & {id(p) for p in policy.parameters()}
    obs = torch.from_numpy(random_legal_observations(env, 5))
    v = value(obs)
    assert v.shape == (len(obs),) and torch.isfinite(v).all()
    ((v - 1.0) ** 2).mean().backward()
    assert all(p.grad is not None for p in value.parameters())
    assert value(obs[:1]).shape == (1,)


@pytest.mark.parametrize("precision", ["torch", "fp32", "int8", "int8c"])
def test_batch_of_one_and_many_agree(precision: str) -> None:
    torch.manual_seed(0)
    env = _env("macro_tiles_10x10")
    model = _peaked(ChipPolicy(env))
    obs = random_legal_observations(env, 6)
    if precision == "torch":
        run = lambda x: _torch_logits(model, x)  # noqa: E731
    else:
        sess = _session(model, precision)
        run = lambda x: sess.run(None, {"obs": x})[0]  # noqa: E731
    batch = run(obs)
    single = np.concatenate([run(obs[i : i + 1]) for i in range(len(obs))])
    assert batch.shape == single.shape == (len(obs), env.rows * env.cols)
    # int8 quantizes per state (and per macro), never per batch: one state's scale does not
    # depend on the others. At one batch size that is exact: other states in the batch leave a
    # state's logits bit for bit as they were
    others = random_legal_observations(env, 6, seed=1)
    mixed = np.concatenate([obs[:1], others[1 : len(obs)]])
    np.testing.assert_array_equal(run(mixed)[0], batch[0])
    # across batch sizes onnxruntime's fp32 kernels may sum in another order (an AVX2-only
    # CPU: fp32 logits differ by up to 1e-5 between batch 1 and 7), which can move an int8
    # convolution's input across a rounding boundary: one level, not a different scale
    tol = 1e-2 * np.abs(single).max() if precision == "int8c" else 1e-5
    np.testing.assert_allclose(batch, single, rtol=1e-5, atol=tol)


def test_bad_inputs_are_refused() -> None:
    env = _env("sample_clustered")
    model = ChipPolicy(env)
    with pytest.raises(ValueError, match="precision"):
        chip_policy_onnx(model, "fp16")
    with pytest.raises(ValueError, match="obs of shape"):
        model(torch.zeros(2, model.obs_dim + 1))
    with pytest.raises(ValueError, match=">= 1"):
        ChipPolicyConfig(sage_layers=0)
    ports_only = node_text("P", type="PORT", side="LEFT", x=0.0, y=0.0)
    with pytest.raises(ValueError, match="no hard macros"):
        ChipPolicy(ChipPlacementEnv(parse_netlist(ports_only + "\n"), use_fd=False))


def test_ariane133_builds_and_runs() -> None:
    env = _env("ariane133")
    assert (env.n, env.rows, env.cols) == (133, 21, 24)
    torch.manual_seed(0)
    model = ChipPolicy(env)
    obs = random_legal_observations(env, 3)
    want = _torch_logits(model, obs)
    legal = _legal(env, obs)
    assert want.shape == (len(obs), 21 * 24) and np.isfinite(want).all()
    for precision in ("fp32", "int8", "int8c"):
        got = _session(model, precision).run(None, {"obs": obs})[0]
        np.testing.assert_allclose(
            got[legal], want[legal], atol=1e-4 if precision == "fp32" else 0.05
        )
    assert ChipValue(env)(torch.from_numpy(obs)).shape == (len(obs),)
