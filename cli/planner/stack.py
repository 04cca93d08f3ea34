"""A plan as a stack config (the contract the Pulumi program reads), validated through StackConfig."""

from __future__ import annotations

from typing import Any

from cli.planner.optimizer import Candidate, Request
from infra.config import StackConfig, slug

PROVIDER_REGION_KEY = {"aws": "aws:region", "gcp": "gcp:region", "azure": "azure-native:location"}


def job_name(text: str) -> str:
    """A valid job name (letters first, 2-32 characters): llama-7b -> llama-7b, 7B-params -> train-7b."""
    name = slug(text.removesuffix("-params"))
    if not name[:1].isalpha():
        name = f"train-{name}"
    return name[:32].rstrip("-")


def plan_sections(c: Candidate, req: Request, name: str | None = None) -> dict[str, Any]:
    w, s = req.workload, c.setup
    job: dict[str, Any] = {
        "name": job_name(name or w.shape.name),
        "params": w.params,
        "tokens": w.tokens,
        "seq_len": w.seq_len,
        "precision": w.precision,
        "method": w.method,
        "planned_hours": round(c.wall_hours, 3),
        "planned_cost_usd": round(c.cost_usd, 2),
    }
    if not w.shape.name.endswith("-params"):
        job["model"] = w.shape.name
    if w.method == "lora":
        job["lora_rank"] = w.lora_rank
    if req.deadline_hours is not None:
        job["deadline_hours"] = req.deadline_hours
    return {
        "job": job,
        "fleets": [
            {
                "name": "train",
                "cloud": c.offer.cloud,
                "region": c.offer.region,
                "zones": list(c.zones),
                "instance_type": c.offer.instance_type,
                "nodes": c.nodes,
                "purchase": c.purchase,
            }
        ],
        "deepspeed": {
            "zero_stage": s.sharding.zero_stage,
            "offload_optimizer": "cpu" if s.sharding.offload_optimizer else "none",
            "offload_param": "cpu" if s.sharding.offload_param else "none",
            "micro_batch": s.step.micro_batch,
            "grad_accum": s.step.grad_accum,
            "activation_checkpointing": s.checkpointing,
        },
        "checkpoint": {"interval_minutes": c.checkpoint_interval_minutes},
    }


def plan_stack(c: Candidate, req: Request) -> tuple[StackConfig, dict[str, Any]]:
    """(validated config, provider config keys) for `write_stack_file`."""
    config = StackConfig.from_sections(plan_sections(c, req))
    return config, {PROVIDER_REGION_KEY[c.offer.cloud]: c.offer.region}
