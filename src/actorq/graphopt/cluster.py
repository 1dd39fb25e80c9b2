"""Cluster model: devices and the links between them.

A device runs one op at a time (one compute stream) and is described by its peak FLOP/s, memory
bandwidth, memory capacity and a fixed per-op overhead (kernel launch and framework dispatch). An
op's time on a device is the roofline estimate ``overhead + max(flops / flop_s, bytes / mem_bw)``,
the cost model of GO's and Placeto's simulators (Zhou et al., NeurIPS 2020; Addanki et al.,
NeurIPS 2019). A link between two devices has a bandwidth and a latency; a transfer of ``b`` bytes
takes ``latency + b / bandwidth`` and transfers on the same link go one after another.

Presets (``{2,4,8}xgpu-{pcie,nvlink}``, plus ``1xgpu``) use V100-class numbers. They are
*effective* rates, not datasheet peaks, chosen so that the roofline lands where measured kernels
do:

========================  ===============  ==============================================
constant                  value            why
========================  ===============  ==============================================
``flop_s``                10 TFLOP/s       V100 fp32 peak is 15.7; large GEMMs reach ~70%
``mem_bw``                750 GB/s         HBM2 peak 900 GB/s; streaming kernels ~80%
``memory``                16 GiB           V100 16 GB
``op_overhead``           5 µs             kernel launch + TF/PyTorch dispatch per op
PCIe link bandwidth       12 GB/s          PCIe 3.0 x16 (15.75 GB/s peak) measured copies
PCIe link latency         10 µs            cudaMemcpyPeer through the host bridge
NVLink link bandwidth     45 GB/s          NVLink 2, 2 bricks per pair (50 GB/s peak)
NVLink link latency       5 µs             direct peer copy
========================  ===============  ==============================================

``{1,2,4,8}xa100-{pcie,nvlink}`` and ``{1,2,4,8}xh100-{pcie,nvlink}`` are A100- and
H100-class (SXM, 80 GB), with the same derating (~70% of the peak FLOP/s, ~80% of the peak
bandwidths). FLOP/s are TF32 tensor-core rates, the dtype an fp32 model trains at on these GPUs
(``torch.set_float32_matmul_precision("high")``); the IR counts fp32 bytes. Sources: NVIDIA A100
Tensor Core GPU datasheet (2021) and NVIDIA H100 Tensor Core GPU datasheet (2023):

===================  ================================  ================================
constant             A100 (peak -> preset)             H100 (peak -> preset)
===================  ================================  ================================
``flop_s``           156 TFLOP/s TF32 dense -> 110     495 TFLOP/s TF32 dense -> 350
``mem_bw``           2.04 TB/s HBM2e -> 1.6 TB/s       3.35 TB/s HBM3 -> 2.7 TB/s
``memory``           80 GB -> 80 GiB                   80 GB -> 80 GiB
``op_overhead``      5 µs                              5 µs
NVLink bandwidth     NVLink 3: 300 GB/s/dir -> 240     NVLink 4: 450 GB/s/dir -> 360
NVLink latency       5 µs                              5 µs
PCIe bandwidth       PCIe 4.0 x16: 32 GB/s/dir -> 25   PCIe 5.0 x16: 64 GB/s/dir -> 50
PCIe latency         10 µs                             10 µs
===================  ================================  ================================

A cluster file (JSON) overrides any of this::

    {"devices": [{"name": "gpu0", "flop_s": 1e13, "mem_bw": 7.5e11, "memory": 1.7e10,
                  "op_overhead": 5e-6}, ...],
     "link": {"bandwidth": 1.2e10, "latency": 1e-5},
     "links": [{"src": 0, "dst": 1, "bandwidth": 4.5e10, "latency": 5e-6}]}

``link`` is the default for every pair; ``links`` (optional) overrides single pairs in both
directions. Every device field is required: a missing one is an error naming it.
"""

from __future__ import annotations

import dataclasses
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

from actorq.errors import GraphError
from actorq.graphopt.files import LIMIT, index, naming, number, read_json, short, shown
from actorq.inputs import exists, stat_path

DEVICE_FIELDS = ("flop_s", "mem_bw", "memory", "op_overhead")
LINK_FIELDS = ("bandwidth", "latency")

GPU = {"flop_s": 10e12, "mem_bw": 750e9, "memory": 16 * 2**30, "op_overhead": 5e-6}
LINKS = {"pcie": (12e9, 10e-6), "nvlink": (45e9, 5e-6)}
A100 = {"flop_s": 110e12, "mem_bw": 1.6e12, "memory": 80 * 2**30, "op_overhead": 5e-6}
A100_LINKS = {"pcie": (25e9, 10e-6), "nvlink": (240e9, 5e-6)}
H100 = {"flop_s": 350e12, "mem_bw": 2.7e12, "memory": 80 * 2**30, "op_overhead": 5e-6}
H100_LINKS = {"pcie": (50e9, 10e-6), "nvlink": (360e9, 5e-6)}
#: preset device kinds: (device numbers, link numbers per link kind); module docstring for sources
KINDS: dict[str, tuple[dict[str, float], dict[str, tuple[float, float]]]] = {
    "gpu": (GPU, LINKS),
    "a100": (A100, A100_LINKS),
    "h100": (H100, H100_LINKS),
}


@dataclasses.dataclass(frozen=True)
class Device:
    name: str
    flop_s: float
    """Effective FLOP/s."""
    mem_bw: float
    """Effective memory bandwidth, bytes/s."""
    memory: float
    """Memory capacity, bytes."""
    op_overhead: float
    """Fixed cost of every op (kernel launch, dispatch), seconds."""


@dataclasses.dataclass(frozen=True, eq=False)
class Cluster:
    """Devices plus ``bandwidth[i, j]`` (bytes/s) and ``latency[i, j]`` (s) between them."""

    name: str
    devices: tuple[Device, ...]
    bandwidth: np.ndarray
    latency: np.ndarray

    def __post_init__(self) -> None:
        d = len(self.devices)
        if d == 0:
            raise GraphError(f"cluster {self.name!r} has no devices")
        # rates and capacities in [1 / LIMIT, LIMIT], times in [0, LIMIT]: see files.LIMIT for
        # why finite and > 0 is not enough (a denormal FLOP/s makes every op time inf)
        for dev in self.devices:
            for f in DEVICE_FIELDS:
                v = getattr(dev, f)
                lo = 0.0 if f == "op_overhead" else 1 / LIMIT
                try:
                    ok = lo <= float(v) <= LIMIT  # NaN compares false
                except (TypeError, ValueError, OverflowError):
                    ok = False
                if not ok:
                    raise GraphError(
                        f"cluster {self.name!r}: device {dev.name!r} has {f}={short(v, 30)} "
                        f"(must be between {lo:g} and {LIMIT:g})"
                    )
        for arr, what in ((self.bandwidth, "bandwidth"), (self.latency, "latency")):
            if arr.shape != (d, d):
                raise GraphError(f"cluster {self.name!r}: {what} matrix is not {d}x{d}")
        off = ~np.eye(d, dtype=bool)
        bw, lat = self.bandwidth[off], self.latency[off]
        if not (np.all((bw >= 1 / LIMIT) & (bw <= LIMIT)) and np.all((lat >= 0) & (lat <= LIMIT))):
            raise GraphError(
                f"cluster {self.name!r}: link bandwidth must be between {1 / LIMIT:g} and "
                f"{LIMIT:g}, latency between 0 and {LIMIT:g}"
            )

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``flop_s, mem_bw, memory, op_overhead`` as float64 arrays, one entry per device."""
        return tuple(  # type: ignore[return-value]
            np.array([getattr(d, f) for d in self.devices], dtype=np.float64) for f in DEVICE_FIELDS
        )

    def op_times(self, flops: np.ndarray, bytes_moved: np.ndarray) -> np.ndarray:
        """Roofline time of each op on each device: shape ``(num_ops, num_devices)``."""
        f, bw, _, oh = self.arrays()
        return oh[None, :] + np.maximum(flops[:, None] / f[None, :], bytes_moved[:, None] / bw)

    def fastest_device(self) -> int:
        return int(np.argmax([d.flop_s for d in self.devices]))

    def slowest_link(self) -> tuple[float, float]:
        """The lowest bandwidth (bytes/s) and the highest latency (s) between two devices;
        ``(inf, 0)`` for one device (nothing is ever sent)."""
        off = ~np.eye(self.num_devices, dtype=bool)
        if not off.any():
            return float("inf"), 0.0
        return float(self.bandwidth[off].min()), float(self.latency[off].max())

    def describe(self) -> str:
        def dev(d: Device) -> str:
            return f"{d.flop_s / 1e12:g} TFLOP/s, {d.mem_bw / 1e9:g} GB/s, {d.memory / 2**30:g} GiB"

        kinds = {dataclasses.replace(d, name="") for d in self.devices}
        devs = (
            f"{self.num_devices} x ({dev(self.devices[0])})"
            if len(kinds) == 1
            else ", ".join(f"{d.name} ({dev(d)})" for d in self.devices)
        )
        if self.num_devices == 1:
            return f"{self.name}: {devs}"
        off = self.bandwidth[~np.eye(self.num_devices, dtype=bool)]
        lo, hi = off.min() / 1e9, off.max() / 1e9
        link = f"{lo:g} GB/s" if lo == hi else f"{lo:g}-{hi:g} GB/s"
        return f"{self.name}: {devs}, links {link}"


def _uniform(name: str, devices: list[Device], bw: float, lat: float) -> Cluster:
    d = len(devices)
    return Cluster(name, tuple(devices), np.full((d, d), bw), np.full((d, d), lat))


def preset_names() -> list[str]:
    return [
        name
        for dev in KINDS
        for name in [f"1x{dev}"] + [f"{n}x{dev}-{k}" for k in LINKS for n in (2, 4, 8)]
    ]


def get_cluster(spec: str | Path) -> Cluster:
    """A preset name (``4xgpu-pcie``, ``8xh100-nvlink``, ``1xa100``) or a path to a JSON
    file."""
    s = str(spec)
    m = re.fullmatch(r"(\d+)x(gpu|a100|h100)(?:-(pcie|nvlink))?", s)
    if m:
        digits, dev, kind = m.group(1), m.group(2), m.group(3) or "pcie"
        # int() of thousands of digits raises ValueError; past 2 digits is out of range anyway
        if len(digits) > 3 or not 1 <= int(digits) <= 64:
            raise GraphError(f"cluster {short(s)}: 1 to 64 GPUs")
        n = int(digits)
        numbers, links = KINDS[dev]
        devs = [Device(f"gpu{i}", **numbers) for i in range(n)]
        return _uniform(s, devs, *links[kind])
    p = Path(s)
    if p.suffix == ".json" or exists(p, f"cluster {shown(p)}", GraphError):
        return load_cluster(p)
    raise GraphError(
        f"unknown cluster {s!r}; presets: {', '.join(preset_names())}, or a .json file"
    )


def load_cluster(path: str | Path) -> Cluster:
    """Read a cluster file (format in the module docstring); every missing field is named. Anything
    wrong with the file is one :class:`GraphError` line that starts with the path."""
    p = Path(path)
    st = stat_path(p, shown(p), GraphError)
    if st is None:
        raise GraphError(f"cluster file not found: {shown(p)}")
    if not stat.S_ISREG(st.st_mode):  # a directory, FIFO, device: never opened
        raise GraphError(f"{shown(p)} is not a regular file; give a cluster file")
    with naming(p):
        return cluster_from_dict(read_json(p), name=p.stem, where=shown(p))


MAX_DEVICES = 1024
"""Link bandwidths and latencies are dense ``d x d`` matrices (and the simulator's per-device
state is too): a file with a million devices must be an error, not a 7 TiB allocation."""


def _field(obj: dict[str, Any], field: str, where: str, *, positive: bool) -> float:
    if field not in obj:
        raise GraphError(f"{where}: missing field {field!r}")
    return number(obj[field], where, field, positive=positive)


def cluster_from_dict(d: Any, name: str = "cluster", where: str = "cluster") -> Cluster:
    """A :class:`Cluster` from a parsed cluster file; every field type- and range-checked."""
    if not isinstance(d, dict):
        raise GraphError(f"{where}: expected a JSON object with 'devices' and 'link'")
    for k in ("devices", "link"):
        if k not in d:
            raise GraphError(f"{where}: missing field {k!r}")
    if not isinstance(d["devices"], list) or not d["devices"]:
        raise GraphError(f"{where}: 'devices' must be a non-empty list")
    if len(d["devices"]) > MAX_DEVICES:
        raise GraphError(f"{where}: {len(d['devices'])} devices; at most {MAX_DEVICES}")
    cname = d.get("name", name)
    if not isinstance(cname, str):
        raise GraphError(f"{where}: 'name' must be a string, got {short(cname)}")
    devs = []
    for i, dv in enumerate(d["devices"]):
        w = f"{where}: devices[{i}]"
        if not isinstance(dv, dict):
            raise GraphError(f"{w} must be an object")
        dname = dv.get("name", f"dev{i}")
        if not isinstance(dname, str):
            raise GraphError(f"{w}: 'name' must be a string, got {short(dname)}")
        vals = {f: _field(dv, f, w, positive=f != "op_overhead") for f in DEVICE_FIELDS}
        devs.append(Device(dname, **vals))
    if not isinstance(d["link"], dict):
        raise GraphError(f"{where}: 'link' must be an object")
    bw0, lat0 = (
        _field(d["link"], f, f"{where}: link", positive=f == "bandwidth") for f in LINK_FIELDS
    )
    n = len(devs)
    bw, lat = np.full((n, n), bw0), np.full((n, n), lat0)
    links = d.get("links", [])
    if not isinstance(links, list):
        raise GraphError(f"{where}: 'links' must be a list, got {short(links)}")
    for li, ln in enumerate(links):
        w = f"{where}: links[{li}]"
        if not isinstance(ln, dict):
            raise GraphError(f"{w} must be an object")
        for f in ("src", "dst"):
            if f not in ln:
                raise GraphError(f"{w}: missing field {f!r}")
        i, j = index(ln["src"], n, w, "src"), index(ln["dst"], n, w, "dst")
        if i == j:
            raise GraphError(f"{w}: src/dst must be two different devices in 0..{n - 1}")
        bw[i, j] = bw[j, i] = _field(ln, "bandwidth", w, positive=True)
        lat[i, j] = lat[j, i] = _field(ln, "latency", w, positive=False)
    return Cluster(cname, tuple(devs), bw, lat)
