"""Planted bugs in NCCL's cost model as the planner keeps it (cli/planner/nccl.py): each one prices collectives at
scale as NCCL would not, so a plan at 1,000-16,000 devices misstates its communication.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "nccl-model"
TESTS = ["tests/test_nccl_model.py", "tests/test_planner_parallelism_math.py"]
NCCL = "cli/planner/nccl.py"

MUTANTS = [
    {
        "file": NCCL,
        "bug": "a ring's steps across nodes are priced at the NVLink latency",
        "original": "    return BASE_LATENCY_US[\"ring\"][p] + (steps - inter_steps) * max(intra, overhead) + inter_steps * inter",
        "replacement": "    return BASE_LATENCY_US[\"ring\"][p] + steps * max(intra, overhead)",
    },
    {
        "file": NCCL,
        "bug": "the tree's depth grows with the node count, not its logarithm",
        "original": "int(math.log2(f.nodes)) * inter)",
        "replacement": "(f.nodes - 1) * inter)",
    },
    {
        "file": NCCL,
        "bug": "all-reduce never runs as a tree",
        "original": "    return min(_ring(nbytes, simple_ring_s, f, True), _tree(nbytes, simple_ring_s, f))",
        "replacement": "    return _ring(nbytes, simple_ring_s, f, True)",
    },
    {
        "file": NCCL,
        "bug": "LL128 is offered over PCIe, where NCCL disables it",
        "original": "    return (LL, LL128, SIMPLE) if f.nvlink else (LL, SIMPLE)",
        "replacement": "    return (LL, LL128, SIMPLE)",
    },
    {
        "file": NCCL,
        "bug": "the Simple ring all-reduce's plateau latency is left out",
        "original": "        simple *= RING_PLATEAU",
        "replacement": "        simple *= 1.0",
    },
    {
        "file": NCCL,
        "bug": "LL's bandwidth is not capped at NCCL's llMaxBw",
        "original": "    return min(best, (ll + max(simple_s / 0.5, moved / _ll_cap_bps(f)), \"Ring\", \"LL\"))",
        "replacement": "    return min(best, (ll + simple_s / 0.5, \"Ring\", \"LL\"))",
    },
    {
        "file": NCCL,
        "bug": "with one GPU a node, the ring keeps its own network latency (NCCL takes the tree's)",
        "original": "    inter = HW_LATENCY_US[\"net\"][\"tree\" if f.per_node == 1 else \"ring\"][p]",
        "replacement": "    inter = HW_LATENCY_US[\"net\"][\"ring\"][p]",
    },
    {
        "file": NCCL,
        "bug": "the tree's correction for medium sizes is ignored (NCCL slows its model's tree there)",
        "original": "    correction = TREE_CORRECTION_AT[log_size] if 0 <= log_size < 23 else (1.0, 1.0, 1.0)",
        "replacement": "    correction = (1.0, 1.0, 1.0)",
    },
    {
        "file": NCCL,
        "bug": "an all-reduce's ring takes the steps of one reduce-scatter, not of a reduce-scatter and an all-gather",
        "original": "    steps = (2 if allreduce else 1) * (f.ranks - 1)",
        "replacement": "    steps = f.ranks - 1",
    },
    {
        "file": NCCL,
        "bug": "LL128 is taken to move bytes as fast as Simple (NCCL's ring LL128 runs at 0.92 of it)",
        "original": "        best = min(best, (ll128 + simple_s / RING_LL128_BW, \"Ring\", \"LL128\"))",
        "replacement": "        best = min(best, (ll128 + simple_s, \"Ring\", \"LL128\"))",
    },
]
