"""NCCL's own cost model as cli/planner/nccl.py keeps it, worked by hand from NCCL's source.

Reference: NVIDIA/nccl src/graph/tuning.cc @ 5067397c2676d5aed50042fc39e5c8ee96eb0027 (2026-06-11), vendored in part
under tests/fixtures/nccl/ with its provenance. Each expected value below is that file's constants put through its
formulas by hand (microseconds, GB/s): what NCCL's tuner would predict and pick on the same communicator.
"""

from __future__ import annotations

import re

import pytest

from cli.planner import nccl
from cli.planner.nccl import Fabric
from tests.conftest import REPO

TUNING = (REPO / "tests" / "fixtures" / "nccl" / "tuning.cc.excerpt").read_text()


def test_the_constants_are_nccls_own():
    """The vendored excerpt of tuning.cc holds every constant the module keeps, as NCCL writes them."""
    assert "{  6.8, 14.0,  8.4 }, {  6.6, 14.0,  8.4 },  // Tree, Ring" in TUNING
    assert nccl.BASE_LATENCY_US == {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
    rows = re.findall(r"\{ \{ ([\d., ]+) \}, \{ ([\d., ]+) \}, /\* Tree \(LL/LL128/Simple\), Ring", TUNING)
    hw = [tuple(tuple(float(x) for x in part.split(",")) for part in row) for row in rows]
    assert hw == [(nccl.HW_LATENCY_US[k]["tree"], nccl.HW_LATENCY_US[k]["ring"]) for k in ("nvlink", "pci", "net")]
    assert "{39.0, 39.0, 20.4}, /* Volta-N1/Intel-N2/Intel-N4) */" in TUNING
    assert "{141.0, 45.0 /*avg of ring & tree*/, 35.0}, /* Hopper-N1/AMD-N2/AMD-N4) */" in TUNING
    assert "lat *= comm->minCompCap < 80 ? 1.9 : 1.4; // Plateau effect of ring" in TUNING
    for protocol, factors in enumerate(nccl.TREE_CORRECTION):
        written = ", ".join(f"{f:.1f}".lstrip("0") if f < 1 else "1.0" for f in factors)
        assert re.sub(r"\s+", " ", written) in re.sub(r"\s+", " ", TUNING), protocol


def test_a_ring_across_nodes_pays_intra_steps_and_inter_steps_apart():
    """1536 ranks on 192 nodes of 8 (NVLink): 1535 steps, 191 across nodes. Simple: 8.4 + 1344 x max(3.4, 3 x 1.0)
    + 191 x 14 = 8.4 + 4569.6 + 2674 = 7252.0 us; LL128: 14 + 1344 x 1.9 + 191 x 4.0 = 3331.6 us."""
    f = Fabric(1536, 192, True, "ampere")
    assert nccl._ring_latency_us(f, False, nccl.SIMPLE) == pytest.approx(7252.0)
    assert nccl._ring_latency_us(f, False, nccl.LL128) == pytest.approx(3331.6)
    # a 100 MB all-gather whose bytes take 1 ms on Simple: LL128 3.3316 + 1 / 0.92 = 4.4186 ms beats Simple's 8.252
    choice = nccl.gather_or_scatter(100e6, 1e-3, f)
    assert (choice.algorithm, choice.protocol) == ("Ring", "LL128")
    assert choice.seconds == pytest.approx(3331.6e-6 + 1e-3 / 0.92)


def test_over_pcie_there_is_no_ll128():
    """NCCL enables LL128 only where NVLink joins a node's GPUs (typeIntra <= PATH_NVB): a PCIe node's ring of 8 on
    one node, Simple 8.4 + 7 x 5.7 = 48.3 us, LL 6.6 + 7 x 1.0 = 13.6 us."""
    f = Fabric(8, 1, False)
    assert nccl._protocols(f) == (nccl.LL, nccl.SIMPLE)
    tiny = nccl.gather_or_scatter(1024, 1e-7, f)  # 1 KiB: latency decides, LL
    assert tiny.protocol == "LL" and tiny.seconds == pytest.approx(13.6e-6 + 2e-7)
    big = nccl.gather_or_scatter(1e9, 0.1, f)  # 1 GB: bandwidth decides, Simple
    assert big.protocol == "Simple" and big.seconds == pytest.approx(48.3e-6 + 0.1)


def test_all_reduce_at_thousands_of_nodes_picks_the_tree():
    """16,384 ranks on 2,048 nodes, 64 MB whose Simple ring takes 10 ms of bytes. Ring Simple: (8.4 + (32766 - 4094)
    x 3.4 + 4094 x 14) x 1.4 (plateau) = (8.4 + 97484.8 + 57316) x 1.4 = 216,733 us. Tree Simple: 8.4 + 2 (7 x 4.0 + 11
    x 14) = 372.4 us, bytes 10 ms x 16384/32766 / 0.46 = 10.870 ms, corrected at log2(64 MiB / 64) = 20 by .8:
    13.587 ms, 13.960 in all. Tree LL128: 14 + 2 (7 x 1.25 + 11 x 8.5) = 218.5 us, bytes 10.870 / (120/128), corrected
    by .9: 12.883 ms, 13.101 in all: NCCL picks it."""
    f = Fabric(16384, 2048, True)
    choice = nccl.allreduce(64 * 2**20, 10e-3, f)
    assert choice.algorithm == "Tree" and choice.protocol == "LL128"
    bytes_s = 10e-3 * 16384 / 32766 / 0.46 / (120 / 128) / 0.9
    assert choice.seconds == pytest.approx(218.5e-6 + bytes_s)
    # the ring's best protocol is LL: 6.6 + 28,672 x max(0.6, 1.0) + 4094 x 2.7 = 39,732.4 us of latency + 2 x 10 ms of
    # bytes (half the bandwidth; the 20.4 GB/s cap allows 6.6 ms) = 59.7 ms: why NCCL runs trees at this size
    seconds, _, protocol = nccl._ring(64 * 2**20, 10e-3, f, True)
    assert (protocol, seconds) == ("LL", pytest.approx(39_732.4e-6 + 20e-3))


def test_one_gpu_per_node_takes_the_trees_network_latency():
    """With one rank per node every ring step crosses the network; NCCL then uses the Tree's NET latency: 16 nodes,
    Simple 8.4 + 15 x 14 = 218.4 us; LL128 14 + 15 x 8.5 = 141.5 us."""
    f = Fabric(16, 16, True)
    assert nccl._ring_latency_us(f, False, nccl.SIMPLE) == pytest.approx(218.4)
    assert nccl._ring_latency_us(f, False, nccl.LL128) == pytest.approx(141.5)


def test_ll_is_capped_by_nccls_llmaxbw():
    """Across 3+ nodes LL moves at most 20.4 GB/s (llMaxBws, Intel hosts). 1 MB all-gathered over 32 PCIe ranks on 4
    nodes, its Simple bytes 1 us: Simple 8.4 + 28 x max(5.7, 3) + 3 x 14 = 210 us + 1 us; LL 6.6 + 28 x max(1.0, 1.0) +
    3 x 2.7 = 42.7 us + max(2 us, 1e6 x 31/32 / 20.4e9 = 47.5 us): NCCL runs LL, at its cap."""
    choice = nccl.gather_or_scatter(1e6, 1e-6, Fabric(32, 4, False))
    assert choice.protocol == "LL"
    assert choice.seconds == pytest.approx(42.7e-6 + 1e6 * 31 / 32 / 20.4e9)


def test_the_planner_prices_zero3_at_scale_with_nccls_latency():
    """ZeRO-3 gathers every layer: at 1,536 A100s the ring's 1.5k steps are milliseconds a call, where the old
    flat 2 us a step priced 3.1 ms. The planner's collective now pays what NCCL's model says."""
    from cli.planner.throughput import Hardware, collective_s

    hw = Hardware("A100-80GB", 312.0, 8, 80, 1024, 128, 1600.0, "infiniband")
    one_call = collective_s(100e6, 1, 8, 192, hw)
    bytes_s = 100e6 * (7 / 8 / 235e9 + 191 / 192 / (1600 / 8 * 0.7 * 1e9))
    assert one_call == pytest.approx(3331.6e-6 + bytes_s / 0.92)


def test_a_large_all_reduce_on_two_nodes_is_the_simple_ring_with_its_plateau():
    """16 ranks on 2 nodes, 1 GB whose Simple ring moves its bytes in 1 s. Ring Simple: (8.4 + 28 x max(3.4, 3) + 2 x
    14) x 1.4 = 131.6 x 1.4 = 184.24 us; LL128 75.2 us but 1 / 0.92 s of bytes; Tree Simple 92.4 us but 1 x 16/30
    / 0.46 = 1.159 s (no correction at 1 GB). NCCL runs the Simple ring."""
    choice = nccl.allreduce(1e9, 1.0, Fabric(16, 2, True))
    assert (choice.algorithm, choice.protocol) == ("Ring", "Simple")
    assert choice.seconds == pytest.approx(1.0 + 184.24e-6)
