"""Planted bugs in the optimizer: what a tired engineer might write that would cost a user money or a deadline.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "planner-optimizer"
# plus the CLI tests of the bounds and filters (test_cli_plan.py as a whole takes over a minute)
CLI = "tests/test_cli_plan.py::"
TESTS = [
    "tests/test_planner_rules.py",
    "tests/test_planner_optimizer.py",
    "tests/test_planner_reference.py",
    CLI + "test_quick_start_plan_meets_its_deadline",
    CLI + "test_filters_budget_and_purchase_are_respected",
    CLI + "test_local_zones_only_when_asked",
    CLI + "test_time_objective_is_fastest_within_max_nodes",
    CLI + "test_impossible_deadline_names_bound_and_closest_plan",
]
F = "cli/planner/optimizer.py"

MUTANTS = [
    {
        "file": F,
        "bug": "the time objective ranks plans by cost, so --objective time returns the cheapest, slowest plan",
        "original": "return (self.wall_hours, self.cost_usd, 0.0)",
        "replacement": "return (self.cost_usd, self.wall_hours, 0.0)",
    },
    {
        "file": F,
        "bug": "--time-value is ignored: the cost objective never pays for a faster plan",
        "original": "return (self.cost_usd + req.time_value_usd_per_hour * self.wall_hours, self.wall_hours, self.cost_usd)",
        "replacement": "return (self.cost_usd, self.wall_hours, self.cost_usd)",
    },
    {
        "file": F,
        "bug": "the optimizer grows the user's global batch (micro-batch x devices above it)",
        "original": 'return tuple(mb for mb in divisors(share) if mb <= min(most, MAX_MICRO_BATCH))',
        "replacement": 'return tuple(mb for mb in range(1, share + 1) if mb <= min(most, MAX_MICRO_BATCH))',
    },
    {
        "file": F,
        "bug": "activation checkpointing is never tried, so large models look infeasible or need more nodes",
        "original": "for ckpt in (False, True) for mb in batches), key=lambda p: -p[0])",
        "replacement": "for ckpt in (False,) for mb in batches), key=lambda p: -p[0])",
    },
    {
        "file": F,
        "bug": "the DeepSpeed setup with the LOWEST tokens/s is chosen",
        "original": "return (-st.tokens_per_second, sh.zero_stage,",
        "replacement": "return (st.tokens_per_second, sh.zero_stage,",
    },
    {
        "file": F,
        "bug": "--purchase any never considers spot capacity",
        "original": 'if purchase in ("spot", "any"):',
        "replacement": 'if purchase in ("spot",):',
    },
    {
        "file": F,
        "bug": "a multi-node plan is priced as one node",
        "original": "rate = price * nodes",
        "replacement": "rate = price",
    },
    {
        "file": F,
        "bug": "expected cost ignores interruption loss and checkpoint overhead (useful hours only)",
        "original": 'cost = rate * rel.billed_hours + storage if rel.feasible else math.inf',
        "replacement": 'cost = rate * rel.useful_hours + storage if rel.feasible else math.inf',
    },
    {
        "file": F,
        "bug": "checkpoint storage is left out of a plan's expected cost",
        "original": 'cost = rate * rel.billed_hours + storage if rel.feasible else math.inf',
        "replacement": 'cost = rate * rel.billed_hours if rel.feasible else math.inf',
    },
    {
        "file": F,
        "bug": "the cost breakdown's compute line prices one node whatever the node count",
        "original": '"compute_usd": rate * rel.useful_hours,',
        "replacement": '"compute_usd": price * rel.useful_hours,',
    },
    {
        "file": F,
        "bug": "plans land in AWS Local Zones the account never opted into",
        "original": "elif o.local_zone and not req.local_zones:",
        "replacement": "elif o.local_zone and req.local_zones:",
    },
    {
        "file": F,
        "bug": "Trainium / AI100 offers are planned with DeepSpeed, which cannot drive them",
        "original": "elif o.accelerator in NOT_DEEPSPEED:",
        "replacement": "elif o.accelerator in NOT_DEEPSPEED and False:",
    },
    {
        "file": F,
        "bug": "--clouds is ignored",
        "original": "if req.clouds is not None and o.cloud not in req.clouds:",
        "replacement": "if False:",
    },
    {
        "file": F,
        "bug": "plans use up to twice --max-nodes",
        "original": "counts = [n for n in NODE_COUNTS if n <= max_nodes]",
        "replacement": "counts = [n for n in NODE_COUNTS if n <= 2 * max_nodes]",
    },
    {
        "file": F,
        "bug": "--max-nodes 10 never considers exactly 10 nodes (only the fixed ladder below it)",
        "original": "counts.append(max_nodes)",
        "replacement": "pass",
    },
    {
        "file": F,
        "bug": "--budget is ignored: plans over budget are offered as feasible",
        "original": "return req.budget_usd is None or c.cost_usd <= req.budget_usd",
        "replacement": "return True",
    },
    {
        "file": F,
        "bug": "a plan that misses --deadline by up to 10% is accepted",
        "original": "if req.deadline_hours is not None and c.wall_hours > req.deadline_hours:",
        "replacement": "if req.deadline_hours is not None and c.wall_hours > 1.1 * req.deadline_hours:",
    },
    {
        "file": F,
        "bug": "the best plan is listed again among the alternatives",
        "original": "return out[1:]",
        "replacement": "return out",
    },
    {
        "file": F,
        "bug": "the frontier keeps plans that cost the same as a faster one",
        "original": "        if cost < cheapest:",
        "replacement": "        if cost <= cheapest:",
    },
    {
        "file": F,
        "bug": "the stack file's checkpoint interval is the Young/Daly interval in hours written as minutes",
        "original": "round(self.rel.interval_s / 60, 1)",
        "replacement": "round(self.rel.interval_s / 3600, 1)",
    },
    {
        "file": F,
        "bug": "a node's total accelerator memory is taken as one device's, so models that do not fit are planned",
        "original": 'return Hardware(offer.accelerator, peak, offer.accelerators_per_node, offer.accelerator_memory_gib,',
        "replacement": 'return Hardware(offer.accelerator, peak, offer.accelerators_per_node, offer.accelerator_memory_gib * offer.accelerators_per_node,',
    },
    {
        "file": "cli/planner/report.py",
        "bug": "the deadline that allows the spot plan past it is rounded down, so it still leaves only on-demand",
        "original": "f\"--deadline {math.ceil(spot.wall_hours / 24)}d allows it\")",
        "replacement": "f\"--deadline {round(spot.wall_hours / 24)}d allows it\")",
        "tests": [CLI + "test_a_deadline_only_on_demand_meets_names_the_spot_plan_just_past_it"],
    },
    {
        "file": "cli/planner/report.py",
        "bug": "a spot plan past the deadline is offered to a user who asked for on-demand",
        "original": "req.objective == \"cost\" and req.purchase == \"any\" and",
        "replacement": "req.objective == \"cost\" and",
        "tests": [CLI + "test_a_deadline_only_on_demand_meets_names_the_spot_plan_just_past_it"],
    },
]
