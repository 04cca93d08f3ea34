"""Planted bugs in what the planner prices beside a job's steps (issue 31 #3): each one drops, inflates or
misattributes evaluation or data-loader stalls, the terms that replaced the fitted 29% catch-all.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "planner-overheads"
TESTS = ["tests/test_planner_overheads.py", "tests/test_preview_expected_cost.py"]
OVER = "cli/planner/overheads.py"

MUTANTS = [
    {
        "file": OVER,
        "bug": "evaluation priced as a full training step (forward and backward) instead of a forward pass",
        "original": "return 0.25 if checkpointing else 1 / 3",
        "replacement": "return 1.0",
    },
    {
        "file": OVER,
        "bug": "the recomputed forward is forgotten: with activation checkpointing evaluation costs a third",
        "original": "return 0.25 if checkpointing else 1 / 3",
        "replacement": "return 1 / 3",
    },
    {
        "file": OVER,
        "bug": "the cadence read upside down: iterations x interval",
        "original": "return self.eval_iters / self.eval_every_steps * forward_s",
        "replacement": "return self.eval_iters * forward_s / 1000",
    },
    {
        "file": "cli/planner/optimizer.py",
        "bug": "the search prices no overheads at all (the stalls and evaluation only shown, never in a plan's time)",
        "original": "**w.overheads.shares(setup.step, setup.checkpointing), capacity_wait_s=wait,",
        "replacement": "capacity_wait_s=wait,",
    },
    {
        "file": "cli/planner/reliability.py",
        "bug": "data-loader stalls dropped from the work Daly stretches",
        "original": "daly = daly_wall(useful_s * (1 + eval_share + data_stall_share), tau,",
        "replacement": "daly = daly_wall(useful_s * (1 + eval_share), tau,",
    },
    {
        "file": "cli/commands/plan.py",
        "bug": "--data-stall parsed and then ignored",
        "original": "data_stall_share=data_stall)",
        "replacement": "data_stall_share=None)",
    },
    {
        "file": OVER,
        "bug": "evaluation priced for one micro-batch, not the global batch (accumulation forgotten)",
        "original": "forward_s = st.grad_accum * st.compute_s * forward_share(checkpointing)",
        "replacement": "forward_s = st.compute_s * forward_share(checkpointing)",
    },
    {
        "file": "cli/planner/optimizer.py",
        "bug": "the evaluation cost line shows the data-stall hours",
        "original": '"evaluation_usd": rate * rel.eval_hours,',
        "replacement": '"evaluation_usd": rate * rel.data_stall_hours,',
    },
    {
        "file": "cli/planner/reliability.py",
        "bug": "evaluation and data-stall hours swapped in the result",
        "original": "useful_hours, useful_hours * eval_share, useful_hours * data_stall_share, daly / 3600,",
        "replacement": "useful_hours, useful_hours * data_stall_share, useful_hours * eval_share, daly / 3600,",
    },
    {
        "file": OVER,
        "bug": "plan --write-stack records none of the job's overheads: the preview prices the defaults",
        "original": "return {k: v for k, v in values.items() if v != getattr(DEFAULT_OVERHEADS, k)}",
        "replacement": "return {}",
    },
    {
        "file": OVER,
        "bug": "the preview ignores the overheads a stack declares",
        "original": "return cls.given(**{f.name: getattr(job, f.name) for f in fields(cls)})",
        "replacement": "return cls()",
    },
]
