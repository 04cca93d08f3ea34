"""Usage that infrastructure code cannot know: job hours, checkpoint GB, egress GB.

Each figure comes, in this order, from the usage file (`--usage-file`), the stack's job config, or a
default; every figure carries the label of where it came from, and the preview prints those labels.

A usage file is YAML with any of these keys:

    job_hours: 120              # hours the planned job runs (default: trainfleet:job.planned_hours)
    hours_per_month: 730        # hours a fleet runs in a month (default 730: always on)
    checkpoint_gb: 400          # GB of current checkpoints in the bucket (default: job params x keep_last)
    checkpoint_size_gb: 182     # GB of one checkpoint (default: job params x bytes per parameter)
    checkpoints_per_month: 1460 # checkpoints written in a month (default: fleet hours / checkpoint.interval_minutes)
    egress_gb_per_month: 50     # GB leaving the cloud per month (default 0)
    nat_gb_per_month: 0         # GB through a NAT gateway per month (default 0)
    billing_export_gb: 1        # GB the billing export holds (default 1)
    group_nodes:                # nodes an autoscaled group without desired capacity runs, by resource
      train-asg: 8              #   name (default: the group's maxSize, the most it can scale to)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cli.preview.model import UsageValue
from infra.config import StackConfig, describe_validation_error
from infra.errors import ConfigError, did_you_mean, shown
from infra.strict_yaml import load_yaml
from infra.units import MAX_HOURS

HOURS_PER_MONTH = 730.0
GROUP_NODES = "group_nodes:"  # usage key prefix: nodes of one autoscaled group, by resource name
# trainfleet's default checkpoint.interval_minutes, assumed for a preview document without a stack config
DEFAULT_INTERVAL_MIN = 30.0
MAX_GB = 1e9  # an exabyte: anything larger is a typo, and would print as an unreadable cost
# Bytes per parameter of a full training checkpoint: bf16 weights (2) + fp32 master weights (4) +
# Adam first and second moments (8). A LoRA run saves the adapters plus, once, the bf16 weights (2).
CHECKPOINT_BYTES_PER_PARAM = {"full": 14, "lora": 2}


class UsageFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    job_hours: float | None = Field(None, gt=0, le=MAX_HOURS, allow_inf_nan=False)
    hours_per_month: float | None = Field(None, gt=0, le=744, allow_inf_nan=False)
    checkpoint_gb: float | None = Field(None, ge=0, le=MAX_GB, allow_inf_nan=False)
    checkpoint_size_gb: float | None = Field(None, ge=0, le=MAX_GB, allow_inf_nan=False)
    checkpoints_per_month: float | None = Field(None, ge=0, le=1e7, allow_inf_nan=False)
    egress_gb_per_month: float | None = Field(None, ge=0, le=MAX_GB, allow_inf_nan=False)
    nat_gb_per_month: float | None = Field(None, ge=0, le=MAX_GB, allow_inf_nan=False)
    billing_export_gb: float | None = Field(None, ge=0, le=MAX_GB, allow_inf_nan=False)
    # a mapping in the file; kept as (name, nodes) pairs so the frozen model stays hashable
    group_nodes: tuple[
        tuple[Annotated[str, Field(min_length=1, max_length=200)], Annotated[int, Field(ge=0, le=100_000)]], ...
    ] = ()

    @field_validator("group_nodes", mode="before")
    @classmethod
    def _group_nodes_mapping(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("expected a mapping of group resource name to nodes, e.g. {train-asg: 8}")
        return tuple(value.items())


def read_usage_file(path: Path) -> UsageFile:
    try:
        data = load_yaml(path.read_text(), f"usage file {path}")
    except FileNotFoundError:
        raise ConfigError(f"usage file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"usage file {path} cannot be read ({exc})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"usage file {path}: expected a mapping such as `job_hours: 120`")
    allowed = list(UsageFile.model_fields)
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"usage file {path}: {shown(key)} is not a usage key{did_you_mean(str(key), allowed)}; "
                f"allowed: {', '.join(allowed)}"
            )
    try:
        return UsageFile.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc).replace("trainfleet:", "", 1)
        raise ConfigError(f"usage file {path}: {message}") from None


def resolve_usage(
    config: StackConfig | None, usage_file: UsageFile | None = None, where: str = ""
) -> dict[str, UsageValue]:
    """Every usage figure the pricing functions read, each labelled with where it came from."""
    f = usage_file or UsageFile()
    src = f"usage file {where}".strip() if where else "usage file"
    out: dict[str, UsageValue] = {}

    def pick(key: str, unit: str, fallback: tuple[float, str]) -> None:
        value = getattr(f, key)
        out[key] = (
            UsageValue(value, unit, src)
            if value is not None
            else UsageValue(*fallback[:1], unit, fallback[1])
        )

    pick("hours_per_month", "hours", (HOURS_PER_MONTH, "default: fleets run all month (730 h)"))
    if config is not None and config.job.planned_hours is not None:
        job_default = (
            config.job.planned_hours,
            "stack trainfleet:job.planned_hours (from `trainfleet plan`)",
        )
    else:
        job_default = (
            HOURS_PER_MONTH,
            "default: one month (730 h); no job.planned_hours in the stack, no job_hours in a usage file",
        )
    pick("job_hours", "hours", job_default)
    if config is not None:
        bpp = CHECKPOINT_BYTES_PER_PARAM[config.job.method]
        size = config.job.params * bpp / 1e9
        keep = config.checkpoint.keep_last
        size_source = f"job.params {config.job.params:,} x {bpp} B/param ({config.job.method})"
        ckpt_default = (round(size * keep, 3), f"default: {size_source} x checkpoint.keep_last {keep}")
        size_default = (round(size, 3), f"default: {size_source}")
        interval, interval_source = config.checkpoint.interval_minutes, "stack checkpoint.interval_minutes"
    else:
        ckpt_default = (100.0, "default: 100 GB (no stack config to derive it from)")
        size_default = (100.0 / 3, "default: 100 GB over keep_last 3 (no stack config to derive it from)")
        interval, interval_source = DEFAULT_INTERVAL_MIN, "trainfleet's default interval (no stack config)"
    pick("checkpoint_gb", "GB", ckpt_default)
    pick("checkpoint_size_gb", "GB", size_default)
    hours = out["hours_per_month"].value
    pick(
        "checkpoints_per_month", "checkpoints",
        (round(hours * 60 / interval, 3), f"default: {hours:g} fleet hours / {interval:g} min ({interval_source})"),
    )  # fmt: skip
    pick("egress_gb_per_month", "GB", (0.0, "default: 0 GB (checkpoints and data stay in-region)"))
    pick("nat_gb_per_month", "GB", (0.0, "default: 0 GB through NAT"))
    pick("billing_export_gb", "GB", (1.0, "default: 1 GB of billing export data"))
    for name, nodes in f.group_nodes:
        out[GROUP_NODES + name] = UsageValue(float(nodes), "nodes", src)
    return out


def usage_json(usage: dict[str, UsageValue]) -> dict[str, Any]:
    return {k: v.to_json() for k, v in usage.items()}
