"""How long NCCL takes for one collective, by NCCL's own cost model: the algorithm and protocol it picks by size.

NCCL chooses, for every call, the (algorithm, protocol) pair its tuning model predicts fastest
(src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime): time = latency + bytes / bandwidth.
This module keeps that model's latencies, protocol bandwidth factors and caps, and its algorithm choice. It takes
the Simple protocol's bytes time from the caller, the planner's own measured-efficiency bandwidths
(cli/planner/throughput.py), because NCCL's bandwidths come from a topology search that the planner cannot run.

Constants: NVIDIA/nccl src/graph/tuning.cc @ 5067397c2676d5aed50042fc39e5c8ee96eb0027 (2026-06-11), the default
tuner constants, in microseconds and GB/s. Protocols are LL, LL128 and Simple; algorithms Ring and Tree.
- Ring, reduce-scatter or all-gather over N ranks on n nodes: N - 1 steps, n - 1 of them across nodes.
  All-reduce: 2 (N - 1) steps, 2 (n - 1) across nodes.
  latency = base + (steps - inter steps) x max(intra, net overhead) + inter steps x inter.
  The net overhead is 1 us on Intel hosts, x3 for Simple; with one GPU per node the inter latency is Tree's.
  Simple all-reduce across nodes, with at least 64 bytes a rank a channel, has its latency x 1.4 ("plateau";
  the channel count comes from NCCL's topology search: one is assumed, so every call of 64 bytes a rank pays it).
- Tree, all-reduce only: latency = base + 2 ((N/n - 1) x intra + floor(log2 n) x inter).
  Bandwidth x 0.92 (x 1/3.8 LL, x 120/128 LL128 across nodes), then the algorithm ratio 0.5 against Ring's
  N/steps. Medium sizes are slowed by treeCorrectionFactor.
- LL: half the bandwidth, capped at llMaxBw. LL128: x 0.92 on Ring, only where NVLink joins the node's GPUs
  (NCCL disables it past PCIe switches).
- NCCL's multi-node NVLS/CollNet (SHARP) and PAT algorithms need switch or NIC features the planner does not know
  a cloud node has. PAT runs with one GPU per node only, so none of them is modelled.
- latencyInter, the network plugin's own latency, is taken as 0, as NCCL's InfiniBand transport reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

LL, LL128, SIMPLE = 0, 1, 2
BASE_LATENCY_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
NET_OVERHEAD_US = 1.0  # getNetOverhead: x86 Intel (AMD hosts: 2.0)
# llMaxBws: one node by GPU generation; across 2 and across 3+ nodes by the host CPU (Intel row).
LL_MAX_GBPS_ONE_NODE = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_GBPS_NODES = (39.0, 20.4)  # 2 nodes, 3+ nodes
RING_PLATEAU = 1.4  # Simple ring all-reduce across nodes, compute capability >= 8.0
TREE_BW = 0.92
TREE_LL_BW = 1 / 3.8
TREE_LL128_BW = 120 / 128
RING_LL128_BW = 0.92
# treeCorrectionFactor[protocol][log2(bytes / 64)], for 64 B to 256 MB
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)  # fmt: skip
GENERATION = {"A100": "ampere", "H100": "hopper", "H200": "hopper", "B200": "blackwell", "GB200": "blackwell"}
TREE_CORRECTION_AT = tuple(zip(*TREE_CORRECTION, strict=True))  # by log2(bytes / 64): (LL, LL128, Simple)


@dataclass(frozen=True, slots=True)
class Fabric:
    """What NCCL's model reads of a communicator: its ranks and nodes, and how a node's GPUs are joined."""

    ranks: int
    nodes: int
    nvlink: bool  # NVLink/NVSwitch inside the node (else PCIe)
    generation: str = "hopper"

    @property
    def per_node(self) -> int:
        return self.ranks // self.nodes


@cache
def fabric(ranks: int, nodes: int, nvlink: bool, accelerator: str) -> Fabric:
    """The communicator of `ranks` GPUs of `accelerator` on `nodes` nodes (kept: a search asks for a few, often)."""
    generation = next((gen for prefix, gen in GENERATION.items() if accelerator.startswith(prefix)), "ampere")
    return Fabric(ranks, nodes, nvlink, generation)


@dataclass(frozen=True, slots=True)
class Choice:
    seconds: float
    algorithm: str
    protocol: str


def gather_or_scatter(nbytes: float, simple_s: float, f: Fabric) -> Choice:
    """One reduce-scatter or all-gather of `nbytes` (the whole buffer) that the Simple protocol's bandwidth moves in
    `simple_s`: Ring, with NCCL's fastest protocol."""
    return Choice(*_ring(nbytes, simple_s, f, False))


def allreduce(nbytes: float, simple_ring_s: float, f: Fabric) -> Choice:
    """One all-reduce of `nbytes` whose Simple ring moves its bytes in `simple_ring_s` (a reduce-scatter and an
    all-gather): NCCL's fastest of Ring and Tree, each with its fastest protocol."""
    return Choice(*_allreduce(nbytes, simple_ring_s, f))


def gather_or_scatter_s(nbytes: float, simple_s: float, f: Fabric) -> float:
    """`gather_or_scatter`'s seconds, without building its Choice (the planner asks thousands of times)."""
    return _ring(nbytes, simple_s, f, False)[0]


def allreduce_s(nbytes: float, simple_ring_s: float, f: Fabric) -> float:
    """`allreduce`'s seconds, without building its Choice."""
    return _allreduce(nbytes, simple_ring_s, f)[0]


def _allreduce(nbytes: float, simple_ring_s: float, f: Fabric) -> tuple[float, str, str]:
    return min(_ring(nbytes, simple_ring_s, f, True), _tree(nbytes, simple_ring_s, f))


def _ring(nbytes: float, simple_s: float, f: Fabric, allreduce: bool) -> tuple[float, str, str]:
    ll, ll128, simple = _ring_latencies_s(f, allreduce)
    if allreduce and f.nodes > 1 and nbytes / f.ranks >= 64:
        simple *= RING_PLATEAU
    best = (simple + simple_s, "Ring", "Simple")
    if ll128 is not None:
        best = min(best, (ll128 + simple_s / RING_LL128_BW, "Ring", "LL128"))
    moved = (2 if allreduce else 1) * nbytes * (f.ranks - 1) / f.ranks  # what the ring's bus bandwidth carries
    return min(best, (ll + max(simple_s / 0.5, moved / _ll_cap_bps(f)), "Ring", "LL"))


def _tree(nbytes: float, simple_ring_s: float, f: Fabric) -> tuple[float, str, str]:
    # Ring's algorithm bandwidth is the bus bandwidth x N / (2 (N - 1)); Tree's x 0.92 x 0.5.
    simple = simple_ring_s * f.ranks / (2 * (f.ranks - 1)) / (TREE_BW * 0.5)
    ll, ll128, simple_latency = _tree_latencies_s(f)
    log_size = int(math.log2(nbytes / 64)) if nbytes >= 64 else -1
    correction = TREE_CORRECTION_AT[log_size] if 0 <= log_size < 23 else (1.0, 1.0, 1.0)
    best = (simple_latency + simple / correction[SIMPLE], "Tree", "Simple")
    if ll128 is not None:
        ll128_s = simple / (TREE_LL128_BW if f.nodes > 1 else 7 / 9)
        best = min(best, (ll128 + ll128_s / correction[LL128], "Tree", "LL128"))
    # LL: the bus bandwidth / 3.8, at most llMaxBw, then Tree's ratio 0.5
    ll_s = max(simple / TREE_LL_BW, nbytes / (0.5 * _ll_cap_bps(f)))
    return min(best, (ll + ll_s / correction[LL], "Tree", "LL"))


def _ring_latency_us(f: Fabric, allreduce: bool, p: int) -> float:
    steps = (2 if allreduce else 1) * (f.ranks - 1)
    intra = HW_LATENCY_US["nvlink" if f.nvlink else "pci"]["ring"][p]
    if f.nodes == 1:
        return BASE_LATENCY_US["ring"][p] + steps * intra
    inter_steps = (2 if allreduce else 1) * (f.nodes - 1)
    overhead = NET_OVERHEAD_US * (3 if p == SIMPLE else 1)
    inter = HW_LATENCY_US["net"]["tree" if f.per_node == 1 else "ring"][p]
    return BASE_LATENCY_US["ring"][p] + (steps - inter_steps) * max(intra, overhead) + inter_steps * inter


def _tree_latency_us(f: Fabric, p: int) -> float:
    intra = HW_LATENCY_US["nvlink" if f.nvlink else "pci"]["tree"][p]
    inter = HW_LATENCY_US["net"]["tree"][p]
    return BASE_LATENCY_US["tree"][p] + 2 * ((f.per_node - 1) * intra + int(math.log2(f.nodes)) * inter)


@cache
def _ring_latencies_s(f: Fabric, allreduce: bool) -> tuple[float, float | None, float]:
    """(LL, LL128, Simple) latencies, seconds; LL128 None where NCCL disables it (no NVLink)."""
    ll128 = _ring_latency_us(f, allreduce, LL128) * 1e-6 if LL128 in _protocols(f) else None
    return _ring_latency_us(f, allreduce, LL) * 1e-6, ll128, _ring_latency_us(f, allreduce, SIMPLE) * 1e-6


@cache
def _tree_latencies_s(f: Fabric) -> tuple[float, float | None, float]:
    ll128 = _tree_latency_us(f, LL128) * 1e-6 if LL128 in _protocols(f) else None
    return _tree_latency_us(f, LL) * 1e-6, ll128, _tree_latency_us(f, SIMPLE) * 1e-6


@cache
def _ll_cap_bps(f: Fabric) -> float:
    if f.nodes == 1:
        return LL_MAX_GBPS_ONE_NODE[f.generation] * 1e9
    return LL_MAX_GBPS_NODES[0 if f.nodes == 2 else 1] * 1e9


def _protocols(f: Fabric) -> tuple[int, ...]:
    return (LL, LL128, SIMPLE) if f.nvlink else (LL, SIMPLE)
