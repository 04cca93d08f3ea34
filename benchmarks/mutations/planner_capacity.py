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
        "bug": "the assumed capacity does not shrink as the fleet grows",
        "original": "return max(DEFAULT_LEAST_SCORE, single - math.ceil(math.log2(nodes)))",
        "replacement": "return max(DEFAULT_LEAST_SCORE, single)",
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
        "original": "return 1 - (1 - self.q) ** (math.floor(seconds / RETRY_S + 1e-9) + 1)",
        "replacement": "return 1 - (1 - self.q) ** math.floor(seconds / RETRY_S + 1e-9)",
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
        "original": "restart = PROVISION_S + capacity_wait_s + times.download_s + times.save_s",
        "replacement": "restart = PROVISION_S + times.download_s + times.save_s",
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
        "original": "if hw.devices_per_node % tp == 0 and w.shape.heads % tp == 0]",
        "replacement": "if hw.devices_per_node % tp == 0]",
    },
]
