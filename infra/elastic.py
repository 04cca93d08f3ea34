"""Elastic recovery's one rule: which smaller fleets a pure data-parallel job can shrink to.

A job of N nodes trains with a global batch of micro_batch x grad_accum x slots x N sequences per step. On n < N
nodes it keeps that batch by accumulating grad_accum x N / n micro-batches, so n is usable when that is a whole
number, (grad_accum x N) % n == 0, and n >= min_nodes. The node agent picks the largest usable n among the nodes
it holds; the schema (infra/config.py) and the planner (cli/planner/reliability.py) read the same rule here.
"""

from __future__ import annotations

DEFAULT_WAIT_S = 600.0  # checkpoint.elastic.wait_for_replacement_s when a stack or `plan --elastic` names none


def usable_node_counts(nodes: int, grad_accum: int, min_nodes: int) -> list[int]:
    """Node counts n in [min_nodes, nodes - 1] a job of `nodes` nodes at `grad_accum` can shrink to, ascending."""
    return [n for n in range(max(1, min_nodes), nodes) if (grad_accum * nodes) % n == 0]


def accumulation_at(nodes: int, grad_accum: int, n: int) -> int:
    """Gradient accumulation on `n` nodes that keeps the global batch of `nodes` nodes at `grad_accum`."""
    if n < 1 or (grad_accum * nodes) % n:
        raise ValueError(f"{n} nodes cannot keep the global batch of {nodes} nodes x grad_accum {grad_accum}")
    return grad_accum * nodes // n


def shrink_to(nodes: int, grad_accum: int, min_nodes: int, available: int | None = None) -> int | None:
    """The node count the job runs on with `available` nodes held (default: one lost): the largest usable one."""
    held = nodes - 1 if available is None else available
    usable = [n for n in usable_node_counts(nodes, grad_accum, min_nodes) if n <= held]
    return usable[-1] if usable else None


def fix_hint(nodes: int, grad_accum: int, min_nodes: int) -> str:
    """How to get a usable shrunk size when there is none: the smallest grad_accum multiple that gives one, or a
    lower min_nodes."""
    if nodes < 2:
        return "a one-node fleet has nothing to shrink to; remove checkpoint.elastic or add nodes"
    # grad_accum x (nodes - 1) always shrinks to nodes - 1, so the search ends by then when min_nodes < nodes
    accum = next(
        (a for a in range(grad_accum, grad_accum * nodes + 1) if usable_node_counts(nodes, a, min_nodes)), None
    )
    if accum is None:
        return f"lower min_nodes below {nodes}"
    smaller = [n for n in usable_node_counts(nodes, grad_accum, 1) if n < min_nodes]
    lower = f" or lower min_nodes to {smaller[-1]}" if smaller else ""
    shrunk = usable_node_counts(nodes, accum, min_nodes)[-1]
    return f"raise deepspeed.grad_accum to {accum} (a larger global batch; it then shrinks to {shrunk} nodes){lower}"
