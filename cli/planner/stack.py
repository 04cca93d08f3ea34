"""A plan as a stack config (the contract the Pulumi program reads), validated through StackConfig."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.planner.optimizer import Candidate, Request
from infra.config import NAMESPACE, StackConfig, slug
from infra.errors import ConfigError
from infra.stack_file import plain_data

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
    job.update(w.overheads.stack_fields())
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
            "tensor_parallel": s.tp,
            "pipeline_parallel": s.pp,
        },
        "checkpoint": {
            "interval_minutes": c.checkpoint_interval_minutes,
            **({"elastic": elastic_section(c)} if c.rel.elastic is not None else {}),
        },
    }


def elastic_section(c: Candidate) -> dict[str, Any]:
    """checkpoint.elastic of a plan priced with --elastic (only where it applies: the plan's rel has it)."""
    e = c.rel.elastic.setting
    return {"min_nodes": e.min_nodes, "wait_for_replacement_s": e.wait_s}


def plan_stack(c: Candidate, req: Request) -> tuple[StackConfig, dict[str, Any]]:
    """(validated config, provider config keys) for `write_stack_file`."""
    config = StackConfig.from_sections(plan_sections(c, req))
    return config, {PROVIDER_REGION_KEY[c.offer.cloud]: c.offer.region}


# ---- writing a plan into an existing stack file ----------------------------------------------------------
#
# What the planner owns in a stack file, and so what `plan --write-stack ENV --force` may change. Everything
# else (budget, tags, launch, billing_export, checkpoint.keep_last/retention_days/bucket_name, the fleet's
# name, root volume, SSH CIDRs, other namespaces, secrets, encryptionsalt, comments) is kept byte for byte.
# not `name`: it names deployed resources
JOB_OWNED = ("model", "params", "tokens", "seq_len", "precision", "method", "lora_rank", "deadline_hours",
             "eval_every_steps", "eval_iters", "data_stall_share", "planned_hours", "planned_cost_usd")  # fmt: skip
FLEET_OWNED = ("cloud", "region", "zones", "instance_type", "nodes", "purchase")
DEEPSPEED_OWNED = ("zero_stage", "offload_optimizer", "offload_param", "micro_batch", "grad_accum",
                   "activation_checkpointing", "tensor_parallel", "pipeline_parallel")  # fmt: skip
# checkpoint.elastic: written with --elastic, dropped (with a note) when it no longer fits the plan
CHECKPOINT_OWNED = ("interval_minutes", "elastic")
# Fleet keys that only make sense for the old placement, dropped (with a note) when the plan moves it.
FLEET_TIED_TO_REGION = ("image", "network", "fallback_instance_types")  # AMI ids, VPCs, types: per region
FLEET_TIED_TO_TYPE = ("max_price",)  # a USD/hour cap for one instance type
FLEET_TIED_TO_MIXED = ("on_demand_base", "on_demand_percentage_above_base")  # purchase: mixed only


def planned_values(c: Candidate, req: Request) -> tuple[dict[str, Any], dict[str, Any]]:
    """The planner's keys per section, in the stack file's own spelling (7B, not 7000000000), and the provider
    region key: only what the plan decides, not the defaults StackConfig fills in."""
    raw = plan_sections(c, req)
    full = StackConfig.from_sections(raw).to_sections()
    planned = {
        "job": {k: full["job"][k] for k in raw["job"]},
        "fleets": [{k: full["fleets"][0][k] for k in raw["fleets"][0]}],
        "deepspeed": {k: full["deepspeed"][k] for k in raw["deepspeed"]},
        "checkpoint": {k: full["checkpoint"][k] for k in raw["checkpoint"]},
    }
    return planned, {PROVIDER_REGION_KEY[c.offer.cloud]: c.offer.region}


def _set(mapping, key: str, value: Any) -> None:
    """Set only what changes, so an unchanged value keeps its exact spelling, quoting and comment."""
    from ruamel.yaml.comments import CommentedSeq

    old = mapping.get(key)
    if key in mapping and plain_data(old) == value:
        return
    if isinstance(value, list) and isinstance(old, CommentedSeq) and old.fa.flow_style():
        seq = CommentedSeq(value)
        seq.fa.set_flow_style()  # zones: [a, b] stays on one line
        value = seq
    mapping[key] = value


def _section(config, key: str, where: str):
    from ruamel.yaml.comments import CommentedMap

    value = config.get(key)
    if value is None:
        config[key] = value = CommentedMap()
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key} must be a mapping; fix it or write another stack")
    return value


def merge_plan(config, planned: dict[str, Any], provider: dict[str, Any], where: str) -> list[str]:
    """Write the planner's keys into the round-trip `config:` mapping of an existing stack file, in place.

    Returns notes naming what was dropped because the plan made it stale (it stays in the backup)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    notes: list[str] = []
    ns = f"{NAMESPACE}:"
    fleets = config.get(ns + "fleets")
    if isinstance(fleets, list) and len(fleets) > 1:
        names = ", ".join(str(f.get("name")) if isinstance(f, dict) else "?" for f in fleets)
        raise ConfigError(
            f"{where} has {len(fleets)} fleets ({names}) and a plan is one fleet; write the plan to a new stack "
            "(--write-stack NAME) and copy what you need, or remove the fleets you no longer want"
        )
    if fleets is not None and not (isinstance(fleets, list) and all(isinstance(f, dict) for f in fleets)):
        raise ConfigError(f"{where}: {ns}fleets must be a list of fleets; fix it or write another stack")

    job = _section(config, ns + "job", where)
    if "name" not in job:
        job["name"] = planned["job"]["name"]
    for key in JOB_OWNED:
        if key in planned["job"]:
            _set(job, key, planned["job"][key])
        elif key in job:
            notes.append(f"dropped {ns}job.{key} ({plain_data(job[key])!r}): this plan does not set it")
            del job[key]

    plan_fleet = planned["fleets"][0]
    if not fleets:
        fleet = CommentedMap(plan_fleet)
        fleet["zones"] = CommentedSeq(plan_fleet["zones"])
        fleet["zones"].fa.set_flow_style()  # zones: [a, b], as in the example stacks
        config[ns + "fleets"] = [fleet]
    else:
        fleet = fleets[0]
        moved = (plain_data(fleet.get("cloud")), plain_data(fleet.get("region"))) != (
            plan_fleet["cloud"], plan_fleet["region"])  # fmt: skip
        retyped = plain_data(fleet.get("instance_type")) != plan_fleet["instance_type"]
        stale = [*(FLEET_TIED_TO_REGION if moved else ()), *(FLEET_TIED_TO_TYPE if retyped else ())]
        if plan_fleet["purchase"] != "mixed":
            stale += FLEET_TIED_TO_MIXED
        for key in FLEET_OWNED:
            _set(fleet, key, plan_fleet[key])
        fleet_name = plain_data(fleet.get("name"))
        for key in stale:
            if key in fleet:
                why = (
                    f"purchase is now {plan_fleet['purchase']}" if key in FLEET_TIED_TO_MIXED
                    else f"the fleet moves to {plan_fleet['cloud']} {plan_fleet['region']}" if key in FLEET_TIED_TO_REGION
                    else f"the instance type is now {plan_fleet['instance_type']}"
                )  # fmt: skip
                notes.append(f"dropped fleet {fleet_name} {key} ({plain_data(fleet[key])!r}): {why}")
                del fleet[key]
        fallbacks = fleet.get("fallback_instance_types")
        if isinstance(fallbacks, list) and plan_fleet["instance_type"] in fallbacks:
            fallbacks.remove(plan_fleet["instance_type"])  # the planned type is no fallback for itself

    for section, owned in (("deepspeed", DEEPSPEED_OWNED), ("checkpoint", CHECKPOINT_OWNED)):
        values = _section(config, ns + section, where)
        for key in owned:
            if key in planned[section]:
                _set(values, key, planned[section][key])
    notes += _drop_unfit_elastic(config[ns + "checkpoint"], planned)

    for key, value in provider.items():
        if isinstance(config.get(key), dict):  # a secret (secure: ...) region: the user's, left alone
            continue
        _set(config, key, value)
    return notes


def _drop_unfit_elastic(checkpoint, planned: dict[str, Any]) -> list[str]:
    """A checkpoint.elastic the plan did not write stays when it fits the planned fleet and setup, and is dropped
    (with a note) when it does not: the schema would refuse the file."""
    from cli.planner.reliability import elastic_setting

    old = checkpoint.get("elastic")
    if "elastic" in planned["checkpoint"] or not isinstance(old, dict):
        return []
    fleet, ds = planned["fleets"][0], planned["deepspeed"]
    try:
        least = int(plain_data(old.get("min_nodes")))
    except (TypeError, ValueError):
        return []  # not a number: the schema names it
    setting, why = elastic_setting(fleet["nodes"], ds["grad_accum"], ds["tensor_parallel"], ds["pipeline_parallel"],
                                   least, 0.0)  # fmt: skip
    if setting is not None:
        return []
    del checkpoint["elastic"]
    return [f"dropped {NAMESPACE}:checkpoint.elastic ({plain_data(old)!r}): it does not fit this plan ({why}); "
            "plan with --elastic to set it"]  # fmt: skip


@dataclass
class Written:
    path: Path
    backup: Path | None = None
    notes: list[str] = field(default_factory=list)


def write_plan(c: Candidate, req: Request, target: Path) -> Written:
    """A new stack file from the plan, or the plan's keys merged into an existing one (see merge_plan)."""
    from infra.stack_file import edit_stack_file, write_stack_file

    if not target.exists():
        config, provider = plan_stack(c, req)
        return Written(write_stack_file(target, config, provider))
    planned, provider = planned_values(c, req)
    edited = edit_stack_file(target, lambda config: merge_plan(config, planned, provider, str(target)))
    return Written(target, edited.backup, edited.notes)
