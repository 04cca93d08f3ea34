"""Planted bugs in how `trainfleet plan` skips fleets (issue 31 #8): each one skips a fleet whose plan would have
shown (a runner-up or a frontier plan lost, or the best itself), or prices a setup that could not win instead of
one that could.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "planner-standing"
TESTS = ["tests/test_planner_standing.py", "tests/test_planner_bounds.py", "tests/test_planner_optimizer.py",
         "tests/test_planner_checkpoint_parts.py",
         "tests/test_checkpoint_layout.py::test_layouts_of_one_parts_key_put_the_same_bytes_on_every_node"]
STANDING = "cli/planner/standing.py"
OPT = "cli/planner/optimizer.py"
THROUGHPUT = "cli/planner/throughput.py"

MUTANTS = [
    {
        "file": STANDING,
        "bug": "the frontier is forgotten: a fleet that could only stand on the cost/time frontier is skipped",
        "original": "or not self._dominated(hours_low, cost_low)",
        "replacement": "or False",
    },
    {
        "file": STANDING,
        "bug": "a fleet is kept only for the frontier: one whose plan would rank among the top is skipped",
        "original": "return self.first(hours_low, cost_low) <= self._top_score() or not",
        "replacement": "return not",
    },
    {
        "file": STANDING,
        "bug": "the bar is the best plan found, not the top-th: runners-up are lost",
        "original": "heapq.nsmallest(self.top, self.best.values())[-1]",
        "replacement": "min(self.best.values())",
    },
    {
        "file": STANDING,
        "bug": "the bar is set before top plans are found: the second plan found decides what the runners-up must beat",
        "original": "if len(self.best) >= self.top else math.inf",
        "replacement": "if self.best else math.inf",
    },
    {
        "file": STANDING,
        "bug": "plans past the deadline count as found, and skip fleets that would meet it",
        "original": "if wall_hours > self.deadline:",
        "replacement": "if False:",
    },
    {
        "file": STANDING,
        "bug": "plans over the budget count as found, and skip fleets that would fit it",
        "original": "if cost > self.budget:",
        "replacement": "if False:",
    },
    {
        "file": STANDING,
        "bug": "--objective time ranks fleets by cost: the fastest plan's fleet can be skipped",
        "original": "return hours if self.by_time else cost + self.time_value * hours",
        "replacement": "return cost + self.time_value * hours",
    },
    {
        "file": STANDING,
        "bug": "--time-value is left out of the bar: a faster, dearer plan that ranks first can be skipped",
        "original": "return hours if self.by_time else cost + self.time_value * hours",
        "replacement": "return hours if self.by_time else cost",
    },
    {
        "file": STANDING,
        "bug": "a plan that a faster, cheaper one beat stays on the frontier kept for skipping: fleets it hides are searched",
        "original": "end += 1  # slower and no cheaper: off the frontier",
        "replacement": "break",
    },
    {
        "file": OPT,
        "bug": "a fleet's bound is priced at its dearest offer, not its cheapest: cheap offers of it are skipped",
        "original": "cheapest_rate = min(point[3] for group in groups.values() for point in group)",
        "replacement": "cheapest_rate = max(point[3] for group in groups.values() for point in group)",
    },
    {
        "file": OPT,
        "bug": "found plans are recorded at their useful hours, not their wall time: they look faster than they are",
        "original": "standing.add(rel.wall_hours,",
        "replacement": "standing.add(rel.useful_hours,",
    },
    {
        "file": OPT,
        "bug": "the pricing of setups stops a tenth early: a slower setup with a faster restart is never priced",
        "original": "if best is not None and useful_hours(w, setup) >= best[1][0].wall_hours:",
        "replacement": "if best is not None and useful_hours(w, setup) >= 0.9 * best[1][0].wall_hours:",
    },
    # the speed bounds (a bound below what a setup reaches skips the fleet that holds the best plan)
    {
        "file": THROUGHPUT,
        "bug": "the step floor takes the ZeRO stage that exposes the most, not the least",
        "original": "exposed = min(sum(zero_communication(",
        "replacement": "exposed = max(sum(zero_communication(",
    },
    {
        "file": THROUGHPUT,
        "bug": "the compute floor is recompute's, longer than a step without it",
        "original": "(micro_batches_per_step(w, mb, g * n) + pp - 1) * compute(mb, False)",
        "replacement": "(micro_batches_per_step(w, mb, g * n) + pp - 1) * compute(mb, True)",
    },
    {
        "file": THROUGHPUT,
        "bug": "the collectives hide behind the shortest micro-step, not the longest: the floor exposes too much",
        "original": "max(compute(mb, True) for mb in batches)",
        "replacement": "min(compute(mb, False) for mb in batches)",
    },
    {
        "file": THROUGHPUT,
        "bug": "the floor's tensor-parallel all-reduces are recompute's six a layer, not four",
        "original": "return steps + exposed + tp_comm_micro_s(w, hw, share, False, tp, pp)",
        "replacement": "return steps + exposed + tp_comm_micro_s(w, hw, share, True, tp, pp)",
    },
    {
        "file": THROUGHPUT,
        "bug": "the floor's pipeline sends are counted twice",
        "original": "+ pp_p2p_micro_s(w, hw, share, tp, pp)",
        "replacement": "+ 2 * pp_p2p_micro_s(w, hw, share, tp, pp)",
    },
    {
        "file": OPT,
        "bug": "the fleet bound stops at a layout whose compute alone is within 2x of the speed found",
        "original": "if tokens / computing[0] <= fastest:",
        "replacement": "if tokens / computing[0] <= 2 * fastest:",
    },
    {
        "file": OPT,
        "bug": "the quick bound reads the smallest micro batch, where MFU is lowest",
        "original": "mb = max(batches) if fit.mfu_rises_with_micro_tokens() else min(batches)",
        "replacement": "mb = min(batches)",
    },
    {
        "file": "infra/checkpoint_layout.py",
        "bug": "ZeRO-3 is taken to put its parts by layout like the others: every layout's ZeRO-3 setup is priced",
        "original": "return (stage3,) if stage3 else (stage3, unsharded, pp)",
        "replacement": "return (stage3, pp) if stage3 else (stage3, unsharded, pp)",
    },
]
