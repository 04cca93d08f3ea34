"""Planted bugs in the planner's spot capacity model, outlier pricing and layouts (issue 16): each one promises a
spot fleet that cannot be had, bets on a stale price row, or plans a layout DeepSpeed cannot train.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "planner-capacity"
TESTS = ["tests/test_planner_capacity.py", "tests/test_cli_plan.py", "tests/test_planner_reference.py",
         "tests/test_planner_layouts.py"]  # fmt: skip
CAP = "cli/planner/capacity.py"
OPT = "cli/planner/optimizer.py"

MUTANTS = [
    {
        "file": CAP,
        "bug": "AWS's score read as score/10: a zone scored 1 ('not likely to succeed') still gets plans",
        "original": "return (self.score - 1) / (MAX_SCORE - 1)",
        "replacement": "return self.score / MAX_SCORE",
    },
    {
        "file": CAP,
        "bug": "the traces' wait does not grow with the fleet",
        "original": "return TRACE_SINGLE_NODE_WAIT_S * nodes**TRACE_NODES_EXPONENT",
        "replacement": "return TRACE_SINGLE_NODE_WAIT_S",
    },
    {
        "file": CAP,
        "bug": "every node bills while the job waits for its spot nodes before the start",
        "original": "return 1.0 if self.score is not None else TRACE_HELD_SHARE",
        "replacement": "return 1.0",
    },
    {
        "file": "cli/planner/reliability.py",
        "bug": "spot nodes are lost one at a time: a restart per lost node",
        "original": "per_event = nodes_lost_per_event(interruptible) if spot else 1.0",
        "replacement": "per_event = 1.0",
    },
    {
        "file": CAP,
        "bug": "the first try for unmeasured capacity is no likelier than the rest: an hour's odds halved",
        "original": "return self.q if self.first_try is None else self.first_try",
        "replacement": "return self.q",
    },
    {
        "file": CAP,
        "bug": "an interruption event takes more nodes than any trace measured",
        "original": "(min(nodes, 4) - 1) / 3",
        "replacement": "(nodes - 1) / 3",
    },
    {
        "file": CAP,
        "bug": "a zone question is answered with the regional score",
        "original": 'zone = zones[0] if len(zones) == 1 else ""',
        "replacement": 'zone = ""',
    },
    {
        "file": CAP,
        "bug": "the chance of holding the nodes within an hour forgets the first try",
        "original": 'return 1 - (1 - self.q_first) * (1 - self.q) ** math.floor(seconds / RETRY_S + 1e-9)',
        "replacement": 'return 1 - (1 - self.q) ** math.floor(seconds / RETRY_S + 1e-9)',
    },
    {
        "file": "cli/planner/reliability.py",
        "bug": "the wait for a full set is not counted before the start",
        "original": "wall = daly / (1 - load) + capacity_wait_s if feasible else math.inf",
        "replacement": "wall = daly / (1 - load) if feasible else math.inf",
    },
    {
        "file": "cli/planner/reliability.py",
        "bug": "a restart does not wait for capacity",
        "original": "restart = PROVISION_S + capacity_wait_s + times.download_s + times.load_s",
        "replacement": "restart = PROVISION_S + times.download_s + times.load_s",
    },
    {
        "file": OPT,
        "bug": "spot zones far below their neighbours are bet on at their own price",
        "original": "pool = conservative_spot(filtered_offers(offers, req, stats))",
        "replacement": "pool = filtered_offers(offers, req, stats)",
    },
    {
        "file": OPT,
        "bug": "a zone with measured scores is folded into the cheapest zone of its region",
        "original": "offer.zone if measured else None, len(zones) > 1)",
        "replacement": "None, len(zones) > 1)",
    },
    {
        "file": OPT,
        "bug": "pipeline stages planned with ZeRO-2/3, which DeepSpeed's pipeline engine refuses",
        "original": "and sharding_supported(sh, tp, pp)]",
        "replacement": "]",
    },
    {
        "file": OPT,
        "bug": "tensor parallelism tried on attention heads it cannot split evenly",
        "original": "    return shape.heads % tp == shape.key_value_heads % tp == shape.ffn % tp == 0",
        "replacement": "    return True",
    },
]
