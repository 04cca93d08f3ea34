"""StackConfig: the one stack-config schema, shared by the planner (writes) and the Pulumi program (reads).

A stack file `stacks/Pulumi.<env>.yaml` holds it under Pulumi's config namespace `trainfleet`, one
structured object per section:

    config:
      trainfleet:job:        {name, params, tokens, seq_len, precision, method, ...}
      trainfleet:fleets:     [{name, cloud, region, zones, instance_type, nodes, purchase, ...}]
      trainfleet:deepspeed:  {zero_stage, offload_optimizer, offload_param, micro_batch, grad_accum, ...}
      trainfleet:checkpoint: {interval_minutes, keep_last, retention_days, elastic: {min_nodes, wait_for_replacement_s}}
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
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from infra.elastic import DEFAULT_WAIT_S, fix_hint, usable_node_counts
from infra.errors import ConfigError, TrainfleetError, did_you_mean, shown
from infra.parallelism import PP_MAX, unsupported
from infra.units import MAX_HOURS, MAX_USD, format_count, parse_count

NAMESPACE = "trainfleet"
SLUG = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$"
Cloud = Literal["aws", "gcp", "azure"]
Precision = Literal["bf16", "fp16", "fp8", "fp32"]
OffloadDevice = Literal["none", "cpu", "nvme"]

# Tags (labels on GCP) every resource of a stack carries; `trainfleet spend` filters cost by them.
TAG_STACK = "trainfleet-stack"
TAG_JOB = "trainfleet-job"
TAG_FLEET = "trainfleet-fleet"

# Azure availability zones are the logical zones 1, 2 and 3 of a region (each subscription maps them to
# physical zones): https://learn.microsoft.com/azure/reliability/availability-zones-overview
AZURE_ZONES = ("1", "2", "3")
# The widest network SSH may be opened to, per IP version (see Fleet._cidrs_are_narrow).
SSH_WIDEST_PREFIX = {4: 8, 6: 32}


def _count(value: Any) -> int:
    try:
        return parse_count(value)
    except TrainfleetError as exc:
        raise ValueError(str(exc).split(": ", 1)[-1]) from None


# A positive count that accepts 7B / 1T / 350M in files and writes itself back the same way.
Count = Annotated[int, BeforeValidator(_count), PlainSerializer(format_count, return_type=str)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# Finite and bounded, so nothing computed from them overflows to Infinity (and JSON never shows it).
Hours = Annotated[float, Field(gt=0, le=MAX_HOURS, allow_inf_nan=False, description="at most 10 years")]
Usd = Annotated[float, Field(gt=0, le=MAX_USD, allow_inf_nan=False, description="at most 1e12 USD")]


def _takes_numbers(annotation: Any) -> bool:
    """Whether a field holds numbers: int, float or a Literal of ints, alone or inside list/Optional."""
    if annotation in (int, float):
        return True
    if get_origin(annotation) is Literal:
        return any(type(a) is int for a in get_args(annotation))
    return any(_takes_numbers(a) for a in get_args(annotation))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads True as 1 for an int or float field, and YAML reads yes/on/true as True, so
        `nodes: yes` would silently become 1 node: refuse a boolean wherever a number is expected."""
        items = value if isinstance(value, list) else [value]
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and any(isinstance(v, bool) for v in items) and _takes_numbers(field.annotation):
            what = "holds a yes/no value" if isinstance(value, list) else "is a yes/no value"
            raise ValueError(f"{shown(value)} {what}, not a number; write the number itself")
        return value


class Job(_Section):
    """What is trained: size, data, numerics, and what the plan said it would take."""

    name: str = Field(default="train", pattern=SLUG)
    model: str | None = Field(default=None, description="preset name such as llama-7b, informational")
    params: Count = Field(description="model parameters, e.g. 7B")
    tokens: Count = Field(description="training tokens, e.g. 200B")
    seq_len: int = Field(default=2048, ge=128, le=1_048_576)
    precision: Precision = "bf16"
    method: Literal["full", "lora"] = "full"
    lora_rank: int = Field(default=16, ge=1, le=1024)
    deadline_hours: Hours | None = None
    # What the job runs beside its steps (cli/planner/overheads.py; empty: the planner's published defaults, 10
    # forward-only batches every 1,000 steps and no data-loader stalls). Written by `trainfleet plan` when it was
    # given --eval-every, --eval-iters or --data-stall, so the preview prices the job the plan priced.
    eval_every_steps: int | None = Field(default=None, ge=1, le=10**9)
    eval_iters: int | None = Field(default=None, ge=0, le=10**6)
    data_stall_share: float | None = Field(default=None, ge=0, le=0.9, allow_inf_nan=False)
    # Written by `trainfleet plan`; the preview prices the planned job with these.
    planned_hours: Hours | None = None
    planned_cost_usd: Usd | None = None


class Network(_Section):
    """An existing network to join; leave out to create a minimal private one."""

    name: str = Field(min_length=1, description="VPC id (AWS), network name (GCP) or VNet id (Azure)")
    subnets: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)


class Fleet(_Section):
    """One group of identical training nodes in one region."""

    name: str = Field(pattern=SLUG)
    cloud: Cloud
    region: str = Field(pattern=r"^[a-z][a-z0-9-]{1,62}$", description="e.g. us-east-1, us-central1, eastus")
    zones: list[str] = Field(default_factory=list, description="empty: every zone the catalog knows")
    instance_type: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="e.g. p4d.24xlarge")
    fallback_instance_types: list[str] = Field(default_factory=list)
    nodes: int = Field(ge=1, le=1024)
    purchase: Literal["spot", "on-demand", "mixed"] = "spot"
    on_demand_base: int = Field(default=0, ge=0, description="mixed: nodes always on-demand")
    on_demand_percentage_above_base: int = Field(default=0, ge=0, le=100)
    max_price: float | None = Field(
        None,
        allow_inf_nan=False,
        le=100_000,
        description="USD/hour per node cap for spot; -1 or empty: up to on-demand",
    )
    image: str | None = Field(default=None, description="AMI id / image / image URN; empty: the cloud's DL image")
    root_volume_gb: int = Field(default=200, ge=30, le=16384)
    ssh_cidrs: list[str] = Field(default_factory=list, description="SSH is closed unless CIDRs are named")
    spot_termination_action: Literal["DELETE", "STOP"] = "DELETE"
    # GCP: where the node's right to list and resize its group holds. "project": every managed instance group of
    # the project (IAM conditions cannot name a group; `stacks check` warns). "group-tag": only its own group,
    # through a Resource Manager tag bound to the group at creation and an IAM condition on that tag
    # (infra/gcp/iam.py); set it when the group is created (a tag added later replaces the group), and the
    # deployer needs the Tag Administrator and Tag User roles.
    gcp_group_access: Literal["project", "group-tag"] = "project"
    network: Network | None = None

    @field_validator("ssh_cidrs")
    @classmethod
    def _cidrs_are_narrow(cls, cidrs: list[str]) -> list[str]:
        """SSH opens only to narrow networks: each CIDR, and all of them together, at most a /8 (IPv4,
        16.7M addresses) or a /32 (IPv6). So 0.0.0.0/0 is refused, and so is the internet split in
        pieces (0.0.0.0/1 + 128.0.0.0/1, or 256 /8s)."""
        nets = []
        for cidr in cidrs:
            try:
                net = ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{shown(cidr)} is not a CIDR; use e.g. 203.0.113.0/24") from None
            if net.prefixlen == 0:
                raise ValueError(f"{shown(cidr)} opens SSH to the whole internet; name your own network's CIDR")
            widest = SSH_WIDEST_PREFIX[net.version]
            if net.prefixlen < widest:
                raise ValueError(
                    f"{shown(cidr)} opens SSH to {net.num_addresses:.3g} addresses; each CIDR may be at most a "
                    f"/{widest}; name your own network's CIDR"
                )
            nets.append(net)
        for version, widest in SSH_WIDEST_PREFIX.items():
            covered = sum(
                n.num_addresses for n in ipaddress.collapse_addresses(n for n in nets if n.version == version)
            )
            if covered > 2 ** ((32 if version == 4 else 128) - widest):
                raise ValueError(
                    f"together the IPv{version} CIDRs open SSH to {covered:.3g} addresses, more than one "
                    f"/{widest}; name only your own networks' CIDRs"
                )
        return cidrs

    @field_validator("max_price")
    @classmethod
    def _max_price(cls, value: float | None) -> float | None:
        if value is not None and value != -1 and value <= 0:
            raise ValueError(f"{value!r} must be a positive USD/hour price, or -1 for up to on-demand")
        return value

    @field_validator("zones")
    @classmethod
    def _zone_names(cls, zones: list[str], info: ValidationInfo) -> list[str]:
        for zone in zones:
            if not zone or len(zone) > 63:
                raise ValueError(f"{shown(zone)} is not a zone name; use e.g. use1-az4, us-central1-a or 1")
        if info.data.get("cloud") == "azure" and (bad := [z for z in zones if z not in AZURE_ZONES]):
            raise ValueError(
                f"{shown(bad[0])} is not an Azure availability zone; Azure zones are the logical zones "
                f"{', '.join(AZURE_ZONES)} (or leave zones empty for all)"
            )
        return zones

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
            raise ValueError(f"zones {shown(self.zones)} list a zone twice")
        if self.gcp_group_access != "project" and self.cloud != "gcp":
            raise ValueError(f"gcp_group_access applies to GCP fleets only, not {self.cloud}; remove it")
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
    micro_batch: int = Field(default=1, ge=1, le=4096)
    grad_accum: int = Field(default=1, ge=1, le=65536)
    activation_checkpointing: bool = False
    # TP x PP (x DP, the rest of the world), as the planner chose them; which combinations DeepSpeed can train
    # is infra/parallelism.py's, the fleet-dependent layout is checked where the ds_config is rendered.
    tensor_parallel: Literal[1, 2, 4, 8] = Field(default=1, description="AutoTP degree, within one node")
    pipeline_parallel: int = Field(default=1, ge=1, le=PP_MAX, description="pipeline stages, whole nodes each")

    @model_validator(mode="after")
    def _offload_needs_stage(self) -> DeepSpeed:
        if self.offload_param != "none" and self.zero_stage != 3:
            raise ValueError(f"offload_param needs zero_stage 3, not {self.zero_stage}")
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            raise ValueError("offload_optimizer needs zero_stage 1, 2 or 3, not 0")
        if "nvme" in (self.offload_optimizer, self.offload_param) and self.zero_stage != 3:
            raise ValueError("nvme offload (ZeRO-Infinity) needs zero_stage 3")
        return self

    @model_validator(mode="after")
    def _parallelism_deepspeed_trains(self) -> DeepSpeed:
        reason = unsupported(
            self.zero_stage,
            self.offload_optimizer != "none",
            self.offload_param != "none",
            self.tensor_parallel,
            self.pipeline_parallel,
        )
        if reason:
            raise ValueError(reason)
        return self


class Elastic(_Section):
    """Elastic recovery: when a node is lost and no replacement is up within `wait_for_replacement_s`, the job
    goes on with the nodes left (at least `min_nodes`), its DeepSpeed checkpoint converted to universal form for
    the smaller data-parallel size and the global batch kept by more gradient accumulation; it grows back when
    the replacement arrives. Which counts are usable is infra/elastic.py's rule; pure data parallel only."""

    min_nodes: int = Field(ge=1, le=1024, description="fewest nodes the job keeps training on")
    wait_for_replacement_s: Annotated[float, Field(ge=0, le=86_400, allow_inf_nan=False)] = Field(
        default=DEFAULT_WAIT_S, description="seconds to wait for a replacement node before shrinking, at most a day"
    )


class Checkpointing(_Section):
    interval_minutes: Annotated[float, Field(gt=0, le=525_600, allow_inf_nan=False)] = 30.0  # up to a year
    keep_last: int = Field(default=3, ge=1, le=1000)
    # Days a replaced or pruned checkpoint object is kept as a noncurrent version of the versioned bucket. Every
    # prune leaves a whole checkpoint behind: at 30 days prod would keep ~260 TB (1,440 checkpoints of ~182 GB),
    # so one day, enough to undo an accidental delete, is the default.
    retention_days: int = Field(
        default=1, ge=1, le=3650, description="days a replaced or pruned checkpoint version is kept"
    )
    bucket_name: str | None = Field(
        default=None, description="checked against each fleet cloud's naming rules; see bucket_name_problem"
    )
    elastic: Elastic | None = Field(
        default=None, description="shrink and grow back instead of waiting for a lost node"
    )


class Budget(_Section):
    monthly_limit_usd: Usd
    alert_thresholds_percent: list[Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]] = Field(
        default_factory=lambda: [50.0, 80.0, 100.0], min_length=1
    )
    recipients: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]] = Field(min_length=1)
    # The preview's guardrail for this stack: `trainfleet preview` fails above it.
    fail_above_usd: Usd | None = None
    # AWS budgets filter on the trainfleet-stack cost allocation tag, which counts only once activated. AWS
    # offers a key for activation only after it has appeared on billed resources (about a day after the first
    # tagged resource runs): on an account that has never billed it, UpdateCostAllocationTagsStatus fails
    # ("Tag keys not found") and with it the first `pulumi up`. So it is off until the user says the key has
    # been billed; `stacks check` warns meanwhile and names the command (README "Budgets").
    activate_cost_allocation_tag: bool = False


class BillingExport(_Section):
    enabled: bool = True


# launch.script: a relative path under the node's home, plain characters only (see Launch).
LAUNCH_SCRIPT = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._/-]*")
LAUNCH_SCRIPT_MAX = 255
LAUNCH_ARG_MAX = 4096  # characters per launch.args element
LAUNCH_ARGS_MAX = 256  # elements
# Not in an argument: control characters (NUL, line breaks, tabs, escapes: C0, DEL, C1), Unicode line and
# paragraph separators (YAML reads them as line breaks) and lone surrogates (not encodable).
LAUNCH_ARG_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


class Launch(_Section):
    """What DeepSpeed runs on every node.

    `script` lands in the node's trainfleet.env (a systemd EnvironmentFile that bash also sources), so it is
    a relative path of plain characters under the node's home (/opt/trainfleet): nothing there needs quoting.
    `args` are the user's own strings; the launch script passes each one, quoted, as one argv element, so
    they may hold spaces, quotes, `$` or `;`, but not line breaks or other control characters."""

    script: str = Field(
        default="train.py",
        min_length=1,
        max_length=LAUNCH_SCRIPT_MAX,
        description="training script, relative to the node's home; default: trainfleet's example",
    )
    args: list[Annotated[str, Field(max_length=LAUNCH_ARG_MAX)]] = Field(
        default_factory=list, max_length=LAUNCH_ARGS_MAX
    )
    master_port: int = Field(default=29500, ge=1024, le=65535)

    @field_validator("script")
    @classmethod
    def _script_is_a_plain_relative_path(cls, script: str) -> str:
        if not LAUNCH_SCRIPT.fullmatch(script):
            raise ValueError(
                f"{shown(script)} must be a relative path of letters, digits and . _ - / (not starting "
                f"with / or -), e.g. train.py or jobs/pretrain.py"
            )
        if ".." in script.split("/"):
            raise ValueError(f"{shown(script)} must not leave the node's home with a '..' segment")
        return script

    @field_validator("args")
    @classmethod
    def _args_are_single_lines(cls, args: list[str]) -> list[str]:
        for i, arg in enumerate(args):
            if bad := LAUNCH_ARG_FORBIDDEN.search(arg):
                raise ValueError(
                    f"element {i} {shown(arg)} holds the control character {bad.group()!r}; each is one line of "
                    f"printable text (spaces, quotes and $ are fine: each argument is passed as it is)"
                )
        return args


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

    @model_validator(mode="after")
    def _bucket_name_fits_every_cloud(self) -> StackConfig:
        name = self.checkpoint.bucket_name
        if name is not None:
            for cloud in sorted({f.cloud for f in self.fleets}):
                if problem := bucket_name_problem(name, cloud):
                    raise ConfigError(f"{NAMESPACE}:checkpoint.bucket_name: {shown(name)} {problem}")
        return self

    @model_validator(mode="after")
    def _elastic_fits_every_fleet(self) -> StackConfig:
        elastic = self.checkpoint.elastic
        if elastic is None:
            return self
        where = f"{NAMESPACE}:checkpoint.elastic"
        ds = self.deepspeed
        if (ds.tensor_parallel, ds.pipeline_parallel) != (1, 1):
            raise ConfigError(
                f"{where} needs deepspeed.tensor_parallel and pipeline_parallel 1, not TP {ds.tensor_parallel} x "
                f"PP {ds.pipeline_parallel}: the checkpoint is converted (DeepSpeed universal checkpointing, "
                "ds_to_universal) only for pure ZeRO data parallelism here; remove checkpoint.elastic or use TP 1, PP 1"
            )
        if ds.offload_optimizer == "nvme":
            # DeepSpeed 0.19 (runtime/engine.py `_load_checkpoint`): with the optimizer on NVMe every rank copies
            # <tag>/offloaded_tensors/rank<r> back from the checkpoint, and ds_to_universal writes no such folder.
            raise ConfigError(
                f"{where} cannot resume a ZeRO-Infinity optimizer on NVMe (deepspeed.offload_optimizer: nvme): each "
                "rank loads its own offloaded_tensors folder, which the universal checkpoint a resize converts to has "
                "none, so every resume after a resize would fail; use offload_optimizer cpu or none, or remove "
                "checkpoint.elastic"
            )
        for i, fleet in enumerate(self.fleets):
            nodes, accum, least = fleet.nodes, ds.grad_accum, elastic.min_nodes
            if nodes < 2:
                raise ConfigError(
                    f"{where}: fleets[{i}] ({fleet.name}) has 1 node, nothing to shrink to; remove "
                    "checkpoint.elastic or give the fleet more nodes"
                )
            if least >= nodes:
                raise ConfigError(
                    f"{where}.min_nodes: {least} must be below fleets[{i}] ({fleet.name})'s {nodes} nodes, or there "
                    f"is nothing to shrink to; lower min_nodes to at most {nodes - 1}"
                )
            if not usable_node_counts(nodes, accum, least):
                raise ConfigError(
                    f"{where}: fleets[{i}] ({fleet.name}) of {nodes} nodes at grad_accum {accum} cannot shrink to "
                    f"{least if least == nodes - 1 else f'any of {least} to {nodes - 1}'} nodes and keep its global batch (grad_accum x {nodes} must be a "
                    f"multiple of the smaller count); {fix_hint(nodes, accum, least)}"
                )
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


# ---------------------------------------------------------------- bucket names, per cloud
# AWS S3 general purpose buckets: https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
# GCS: https://cloud.google.com/storage/docs/buckets#naming
# Azure blob containers: https://learn.microsoft.com/rest/api/storageservices/naming-and-referencing-containers--blobs--and-metadata#container-names
# (the Azure program names its own account and container today, so an Azure stack only gets the name checked)
_DOTTED_QUAD = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_S3_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_S3_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def _s3_problem(name: str) -> str | None:
    if not 3 <= len(name) <= 63:
        return f"has {len(name)} characters; S3 bucket names have 3 to 63"
    if not re.fullmatch(r"[a-z0-9.-]+", name):
        return "may hold only lowercase letters, digits, dots and hyphens on S3"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "must begin and end with a lowercase letter or digit on S3"
    if ".." in name:
        return "must not have two adjacent periods on S3"
    if _DOTTED_QUAD.match(name):
        return "must not be formatted as an IP address on S3"
    if prefix := next((p for p in _S3_PREFIXES if name.startswith(p)), None):
        return f"must not start with {prefix!r} (reserved by S3)"
    if suffix := next((x for x in _S3_SUFFIXES if name.endswith(x)), None):
        return f"must not end with {suffix!r} (reserved by S3)"
    return None


def _gcs_problem(name: str) -> str | None:
    longest = 222 if "." in name else 63
    if not 3 <= len(name) <= longest:
        return f"has {len(name)} characters; GCS bucket names have 3 to 63 (222 with dots)"
    if not re.fullmatch(r"[a-z0-9._-]+", name):
        return "may hold only lowercase letters, digits, dots, hyphens and underscores on GCS"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "must begin and end with a lowercase letter or digit on GCS"
    if any(len(part) > 63 for part in name.split(".")):
        return "has a dot-separated part over 63 characters; GCS allows 63"
    if ".." in name:  # an empty dot-separated part
        return "must not have two adjacent periods on GCS"
    if _DOTTED_QUAD.match(name):
        return "must not be formatted as an IP address on GCS"
    if name.startswith("goog"):
        return "must not start with 'goog' on GCS"
    if re.search(r"g[o0][o0]g[l1]e", name):
        return "must not contain 'google' or a close misspelling of it on GCS"
    return None


def _azure_problem(name: str) -> str | None:
    if not 3 <= len(name) <= 63:
        return f"has {len(name)} characters; Azure container names have 3 to 63"
    if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", name):
        return (
            "may hold only lowercase letters, digits and single hyphens between them on Azure "
            "(no dots, underscores or '--')"
        )
    return None


def bucket_name_problem(name: str, cloud: str) -> str | None:
    """Why `name` cannot name a checkpoint bucket on `cloud` (with the fix), or None if it can."""
    problem = {"aws": _s3_problem, "gcp": _gcs_problem, "azure": _azure_problem}[cloud](name)
    return f"{problem}; the stack has {cloud} fleets, so pick a name valid there" if problem else None


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
        _check_fallback_devices(catalog, fleet, where)
        zones = sorted({o.zone for o in catalog.offers(cloud=fleet.cloud, region=fleet.region) if o.zone})
        for zone in fleet.zones:
            if zones and zone not in zones:
                raise ConfigError(
                    f"{where}.zones: {zone!r} is not a zone of {fleet.region}; use some of {', '.join(zones)}"
                )


def _check_fallback_devices(catalog, fleet: Fleet, where: str) -> None:
    """A fallback type must have the primary's accelerators per node: the group launches the same node count
    either way, so another count is another world size, which a DeepSpeed checkpoint will not resume at (its
    ZeRO shards are per data-parallel rank) and the ds_config's batch arithmetic no longer holds."""

    def devices(instance_type: str) -> int:
        return catalog.offers(cloud=fleet.cloud, instance_type=instance_type)[0].accelerators_per_node

    want = devices(fleet.instance_type)
    for j, fallback in enumerate(fleet.fallback_instance_types):
        if (got := devices(fallback)) != want:
            raise ConfigError(
                f"{where}.fallback_instance_types[{j}]: {fallback} has {got} accelerators per node and "
                f"{fleet.instance_type} {want}: the same node count would be another world size, which DeepSpeed "
                f"will not resume at; use a fallback with {want} per node, or a fleet of its own"
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
    return shown(value)


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
