"""StackConfig: the one stack-config schema, shared by the planner (writes) and the Pulumi program (reads).

A stack file `stacks/Pulumi.<env>.yaml` holds it under Pulumi's config namespace `trainfleet`, one
structured object per section:

    config:
      trainfleet:job:        {name, params, tokens, seq_len, precision, method, ...}
      trainfleet:fleets:     [{name, cloud, region, zones, instance_type, nodes, purchase, ...}]
      trainfleet:deepspeed:  {zero_stage, offload_optimizer, offload_param, micro_batch, grad_accum, ...}
      trainfleet:checkpoint: {interval_minutes, keep_last, retention_days}
      trainfleet:budget:     {monthly_limit_usd, alert_thresholds_percent, recipients}
      trainfleet:billing_export: {enabled}
      trainfleet:launch:     {script, args, master_port}
      trainfleet:tags:       {team: ml-platform}

Any bad value raises `ConfigError` with one line naming the key, the bad value and what is allowed.
Catalog checks (instance type offered in that region, zones in that region) happen here too, so a
typo fails at `trainfleet stacks check`, not halfway through `pulumi up`.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from infra.errors import ConfigError, TrainfleetError, did_you_mean
from infra.units import format_count, parse_count

NAMESPACE = "trainfleet"
SLUG = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$"
Cloud = Literal["aws", "gcp", "azure"]
Precision = Literal["bf16", "fp16", "fp8", "fp32"]
OffloadDevice = Literal["none", "cpu", "nvme"]

# Tags (labels on GCP) every resource of a stack carries; `trainfleet spend` filters cost by them.
TAG_STACK = "trainfleet-stack"
TAG_JOB = "trainfleet-job"
TAG_FLEET = "trainfleet-fleet"


def _count(value: Any) -> int:
    try:
        return parse_count(value)
    except TrainfleetError as exc:
        raise ValueError(str(exc).split(": ", 1)[-1]) from None


# A positive count that accepts 7B / 1T / 350M in files and writes itself back the same way.
Count = Annotated[int, BeforeValidator(_count), PlainSerializer(format_count, return_type=str)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class Job(_Section):
    """What is trained: size, data, numerics, and what the plan said it would take."""

    name: str = Field("train", pattern=SLUG)
    model: str | None = Field(None, description="preset name such as llama-7b, informational")
    params: Count = Field(description="model parameters, e.g. 7B")
    tokens: Count = Field(description="training tokens, e.g. 200B")
    seq_len: int = Field(2048, ge=128, le=1_048_576)
    precision: Precision = "bf16"
    method: Literal["full", "lora"] = "full"
    lora_rank: int = Field(16, ge=1, le=1024)
    deadline_hours: PositiveFloat | None = None
    # Written by `trainfleet plan`; the preview prices the planned job with these.
    planned_hours: PositiveFloat | None = None
    planned_cost_usd: PositiveFloat | None = None


class Network(_Section):
    """An existing network to join; leave out to create a minimal private one."""

    name: str = Field(min_length=1, description="VPC id (AWS), network name (GCP) or VNet id (Azure)")
    subnets: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)


class Fleet(_Section):
    """One group of identical training nodes in one region."""

    name: str = Field(pattern=SLUG)
    cloud: Cloud
    region: str = Field(min_length=1)
    zones: list[str] = Field(default_factory=list, description="empty: every zone the catalog knows")
    instance_type: str = Field(min_length=1)
    fallback_instance_types: list[str] = Field(default_factory=list)
    nodes: int = Field(ge=1, le=1024)
    purchase: Literal["spot", "on-demand", "mixed"] = "spot"
    on_demand_base: int = Field(0, ge=0, description="mixed: nodes always on-demand")
    on_demand_percentage_above_base: int = Field(0, ge=0, le=100)
    max_price: float | None = Field(
        None, allow_inf_nan=False, description="USD/hour per node cap for spot; -1 or empty: up to on-demand"
    )
    image: str | None = Field(None, description="AMI id / image / image URN; empty: the cloud's DL image")
    root_volume_gb: int = Field(200, ge=30, le=16384)
    ssh_cidrs: list[str] = Field(default_factory=list, description="SSH is closed unless CIDRs are named")
    spot_termination_action: Literal["DELETE", "STOP"] = "DELETE"
    network: Network | None = None

    @field_validator("ssh_cidrs")
    @classmethod
    def _cidrs_are_narrow(cls, cidrs: list[str]) -> list[str]:
        for cidr in cidrs:
            try:
                net = ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a CIDR; use e.g. 203.0.113.0/24") from None
            if net.prefixlen == 0:
                raise ValueError(f"{cidr!r} opens SSH to the whole internet; name your own network's CIDR")
        return cidrs

    @field_validator("max_price")
    @classmethod
    def _max_price(cls, value: float | None) -> float | None:
        if value is not None and value != -1 and value <= 0:
            raise ValueError(f"{value!r} must be a positive USD/hour price, or -1 for up to on-demand")
        return value

    @model_validator(mode="after")
    def _purchase_mix(self) -> Fleet:
        if self.purchase != "mixed" and (self.on_demand_base or self.on_demand_percentage_above_base):
            raise ValueError(
                f"on_demand_base/on_demand_percentage_above_base apply only to purchase: mixed, "
                f"not {self.purchase!r}"
            )
        if self.on_demand_base > self.nodes:
            raise ValueError(f"on_demand_base {self.on_demand_base} exceeds nodes {self.nodes}")
        if len(set(self.zones)) != len(self.zones):
            raise ValueError(f"zones {self.zones} list a zone twice")
        return self

    @property
    def on_demand_nodes(self) -> int:
        """Nodes bought on demand (the rest are spot), as the mixed-instances policy splits them."""
        if self.purchase == "on-demand":
            return self.nodes
        if self.purchase == "spot":
            return 0
        above = self.nodes - self.on_demand_base
        return self.on_demand_base + math.ceil(above * self.on_demand_percentage_above_base / 100)

    @property
    def spot_nodes(self) -> int:
        return self.nodes - self.on_demand_nodes


class DeepSpeed(_Section):
    """How the model is sharded and fed; rendered into ds_config.json on every node."""

    zero_stage: Literal[0, 1, 2, 3] = 2
    offload_optimizer: OffloadDevice = "none"
    offload_param: OffloadDevice = "none"
    micro_batch: int = Field(1, ge=1, le=4096)
    grad_accum: int = Field(1, ge=1, le=65536)
    activation_checkpointing: bool = False

    @model_validator(mode="after")
    def _offload_needs_stage(self) -> DeepSpeed:
        if self.offload_param != "none" and self.zero_stage != 3:
            raise ValueError(f"offload_param needs zero_stage 3, not {self.zero_stage}")
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            raise ValueError("offload_optimizer needs zero_stage 1, 2 or 3, not 0")
        if "nvme" in (self.offload_optimizer, self.offload_param) and self.zero_stage != 3:
            raise ValueError("nvme offload (ZeRO-Infinity) needs zero_stage 3")
        return self


class Checkpointing(_Section):
    interval_minutes: PositiveFloat = 30.0
    keep_last: int = Field(3, ge=1, le=1000)
    retention_days: int = Field(30, ge=1, le=3650, description="days a replaced checkpoint version is kept")
    bucket_name: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class Budget(_Section):
    monthly_limit_usd: PositiveFloat
    alert_thresholds_percent: list[Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]] = Field(
        default_factory=lambda: [50.0, 80.0, 100.0], min_length=1
    )
    recipients: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]] = Field(min_length=1)
    # The preview's guardrail for this stack: `trainfleet preview` fails above it.
    fail_above_usd: PositiveFloat | None = None


class BillingExport(_Section):
    enabled: bool = True


class Launch(_Section):
    """What DeepSpeed runs on every node."""

    script: str = Field(
        "train.py", min_length=1, description="training script; default: trainfleet's example"
    )
    args: list[str] = Field(default_factory=list)
    master_port: int = Field(29500, ge=1024, le=65535)


class StackConfig(_Section):
    """Everything one stack (environment) declares."""

    job: Job
    fleets: list[Fleet] = Field(min_length=1)
    deepspeed: DeepSpeed = DeepSpeed()
    checkpoint: Checkpointing = Checkpointing()
    budget: Budget | None = None
    billing_export: BillingExport = BillingExport()
    launch: Launch = Launch()
    tags: dict[
        Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$")], Annotated[str, Field(max_length=63)]
    ] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fleet_names_unique(self) -> StackConfig:
        names = [f.name for f in self.fleets]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"fleet names must be unique; {dupes} appear more than once")
        return self

    @classmethod
    def from_sections(cls, sections: dict[str, Any], *, check_catalog: bool = True) -> StackConfig:
        """Validate the `trainfleet:*` sections (keys without the namespace)."""
        if not isinstance(sections, dict):
            raise ConfigError(
                f"{NAMESPACE} config must be a mapping of sections, got {type(sections).__name__}"
            )
        try:
            config = cls.model_validate(sections)
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(exc)) from None
        if check_catalog:
            check_against_catalog(config)
        return config

    def to_sections(self) -> dict[str, Any]:
        """The sections as plain data for a stack file; omits what is unset so files stay short."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=False)

    def resource_tags(self, stack: str, fleet: Fleet | None = None) -> dict[str, str]:
        """Tags every resource gets; cost reports group by them."""
        tags = {**self.tags, TAG_STACK: stack, TAG_JOB: self.job.name}
        if fleet is not None:
            tags[TAG_FLEET] = fleet.name
        return tags


SECTIONS = tuple(StackConfig.model_fields)


def check_against_catalog(config: StackConfig) -> None:
    """Every fleet's instance types are offered in its region and its zones exist there."""
    from infra.catalog import default_catalog  # late: the schema itself needs no data files

    catalog = default_catalog()
    for i, fleet in enumerate(config.fleets):
        where = f"{NAMESPACE}:fleets[{i}]"
        for key, instance_type in [("instance_type", fleet.instance_type)] + [
            (f"fallback_instance_types[{j}]", t) for j, t in enumerate(fleet.fallback_instance_types)
        ]:
            offers = catalog.offers(cloud=fleet.cloud, instance_type=instance_type)
            if not offers:
                known = sorted({o.instance_type for o in catalog.offers(cloud=fleet.cloud)})
                raise ConfigError(
                    f"{where}.{key}: {instance_type!r} is not a {fleet.cloud} instance type in the catalog"
                    f"{did_you_mean(instance_type, known)}; see `trainfleet catalog list --cloud {fleet.cloud}`"
                )
            regions = sorted({o.region for o in offers})
            if fleet.region not in regions:
                raise ConfigError(
                    f"{where}.region: {instance_type} is not offered in {fleet.region!r}; "
                    f"it is offered in {', '.join(regions)}"
                )
        zones = sorted({o.zone for o in catalog.offers(cloud=fleet.cloud, region=fleet.region) if o.zone})
        for zone in fleet.zones:
            if zones and zone not in zones:
                raise ConfigError(
                    f"{where}.zones: {zone!r} is not a zone of {fleet.region}; use some of {', '.join(zones)}"
                )


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = NAMESPACE + ":" + str(loc[0]) if loc else NAMESPACE
    for part in loc[1:]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that owns the field at `loc`, to list its allowed keys."""
    model: Any = StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = (
            model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        )
        if field is None:
            return None
        model = _inner_model(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_validation_error(exc: ValidationError) -> str:
    """One line for the first problem pydantic found: the key, the bad value and what is allowed."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc, kind, ctx = tuple(first["loc"]), first["type"], first.get("ctx") or {}
    # Errors raised inside a union (e.g. Budget | None) carry the branch name in loc; drop it.
    loc = tuple(p for p in loc if not (isinstance(p, str) and p[:1].isupper()))
    key = _key_path(loc)
    given = first.get("input")
    if kind == "missing":
        message = f"{key} is required; add it to the stack file"
    elif kind == "extra_forbidden":
        owner = _model_at(loc[:-1])
        allowed = sorted(owner.model_fields) if owner else []
        hint = did_you_mean(str(loc[-1]), allowed)
        message = f"{key} is not a known key{hint}; allowed keys: {', '.join(allowed)}"
    elif kind in ("literal_error", "enum"):
        message = f"{key}: {_short(given)} is not allowed; use one of {ctx.get('expected')}"
    elif kind == "value_error":
        message = f"{key}: {ctx.get('error', first['msg'])}"
    elif kind == "string_pattern_mismatch":
        message = f"{key}: {_short(given)} has the wrong form; it must match {ctx.get('pattern')}"
    else:
        message = f"{key}: {_short(given)} is not valid: {first['msg'].lower()}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return message


def slug(text: str) -> str:
    """A name usable as a fleet/job name: lowercase letters, digits and dashes."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return cleaned or "train"
