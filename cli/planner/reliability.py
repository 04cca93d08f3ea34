"""What whole runs lose beyond step throughput: spot interruptions, failures, checkpoints, restarts.

Hazards (events per hour):
  spot, per node   = -ln(1 - p) / 730 h, p = the catalog's monthly interruption share (AWS Spot Advisor
                     bucket midpoints 2.5/7.5/12.5/17.5%, >20% taken as 25%; GCP/Azure publish none and
                     carry the catalog's labelled assumption; unknown buckets are taken as >20%)
  failure, per node = devices x 1.97e-5 per device-hour (Llama 3 paper: 419 unexpected interruptions in
                     54 days on 16,384 GPUs), spot or not
  job              = nodes x node hazard
Checkpoint write time d = checkpoint bytes / (nodes x per-node write bandwidth), every node writing its
shard. When the cloud's notice (AWS 120 s, GCP 30 s, Azure 30 s) covers d, an interruption triggers an
emergency checkpoint and loses no work; it costs d + R (restart R = provisioning + reading the checkpoint).
Events that lose work (failures, and spot interruptions whose checkpoint does not fit the notice) are
handled by periodic checkpoints every tau, with Daly's optimum (Young/Daly, higher order):
    tau = sqrt(2 d M) [1 + sqrt(d / 2M) / 3 + d / 18M] - d   (d < 2M; else tau = M),  M = 1 / hazard
and Daly's expected wall time for T useful hours:
    W = M e^(R/M) (e^((tau + d)/M) - 1) T / tau
Safe interruptions then stretch it by 1 / (1 - hazard_safe (d + R)). A plan whose useful work would be
under a third of its wall time is refused as infeasible (it would mostly pay for restarts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOURS_PER_MONTH = 730.0
BUCKET_MONTHLY = {0: 0.025, 1: 0.075, 2: 0.125, 3: 0.175, 4: 0.25}
FAILURES_PER_DEVICE_HOUR = 419 / (54 * 24 * 16384)
NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
PROVISION_S = 600.0  # replacing a node and rejoining the job
CHECKPOINT_GBPS_PER_NODE = 2.0  # GB/s a node writes to object storage, at most half its network
STORAGE_USD_PER_GB_MONTH = {"aws": 0.023, "gcp": 0.020, "azure": 0.018}  # standard object storage
KEEP_LAST = 3  # checkpoints kept (the schema's default keep_last)
MAX_SAFE_LOAD = 0.5  # refuse plans that would spend half their time restarting
MIN_EFFICIENCY = 1 / 3  # refuse plans where less than a third of the paid time is useful work


@dataclass(frozen=True, slots=True)
class Reliability:
    spot_hazard_per_node_hour: float
    failure_hazard_per_node_hour: float
    nodes: int
    notice_s: float
    checkpoint_write_s: float
    restart_s: float
    emergency_checkpoint_fits: bool
    interval_s: float  # periodic checkpoint interval tau
    mtbf_loss_hours: float  # M for events that lose work
    useful_hours: float
    daly_hours: float  # wall time with periodic checkpoints and lossy events
    wall_hours: float  # plus safe (noticed) interruptions
    feasible: bool

    @property
    def checkpoint_overhead_hours(self) -> float:
        return self.useful_hours * self.checkpoint_write_s / self.interval_s

    @property
    def interruption_loss_hours(self) -> float:
        return max(0.0, self.wall_hours - self.useful_hours - self.checkpoint_overhead_hours)

    @property
    def expected_interruptions(self) -> float:
        return (
            self.nodes
            * (self.spot_hazard_per_node_hour + self.failure_hazard_per_node_hour)
            * self.wall_hours
        )

    def explain(self) -> list[str]:
        return [
            f"hazard per node: spot {self.spot_hazard_per_node_hour:.2e}/h, failure "
            f"{self.failure_hazard_per_node_hour:.2e}/h; job ({self.nodes} nodes) expects "
            f"{self.expected_interruptions:.1f} interruptions",
            f"checkpoint write {self.checkpoint_write_s:.0f} s vs notice {self.notice_s:.0f} s: "
            + ("emergency checkpoint fits, spot interruptions lose no work"
               if self.emergency_checkpoint_fits else "does not fit, spot interruptions lose work"),
            f"restart {self.restart_s:.0f} s; Young/Daly interval {self.interval_s / 60:.1f} min for "
            f"M = {self.mtbf_loss_hours:.1f} h between work-losing events",
            f"wall = {self.useful_hours:.2f} h useful + {self.checkpoint_overhead_hours:.2f} h checkpoints + "
            f"{self.interruption_loss_hours:.2f} h lost/restarting = {self.wall_hours:.2f} h",
        ]  # fmt: skip


def monthly_share(bucket: int | None) -> float:
    return BUCKET_MONTHLY[4 if bucket is None else bucket]


def spot_hazard(bucket: int | None) -> float:
    """Interruptions per node-hour from the monthly interruption share."""
    return -math.log1p(-monthly_share(bucket)) / HOURS_PER_MONTH


def daly_interval(write_s: float, mtbf_s: float) -> float:
    """Daly's (2006) higher-order optimum checkpoint interval, seconds of work between checkpoints."""
    if write_s >= 2 * mtbf_s:
        return mtbf_s
    r = write_s / (2 * mtbf_s)
    return math.sqrt(2 * write_s * mtbf_s) * (1 + math.sqrt(r) / 3 + r / 9) - write_s


def daly_wall(useful_s: float, interval_s: float, write_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly's expected wall time for `useful_s` of work with exponential work-losing events."""
    return (
        mtbf_s
        * math.exp(restart_s / mtbf_s)
        * math.expm1((interval_s + write_s) / mtbf_s)
        * useful_s
        / interval_s
    )


def checkpoint_write_s(checkpoint_bytes: float, nodes: int, node_network_gbits: float | None) -> float:
    per_node = CHECKPOINT_GBPS_PER_NODE
    if node_network_gbits:
        per_node = min(per_node, node_network_gbits / 8 / 2)
    return checkpoint_bytes / (nodes * per_node * 1e9)


def assess(
    useful_hours: float,
    nodes: int,
    devices_per_node: int,
    cloud: str,
    spot: bool,
    interruption_bucket: int | None,
    checkpoint_bytes: float,
    node_network_gbits: float | None,
) -> Reliability:
    spot_node = spot_hazard(interruption_bucket) if spot else 0.0
    fail_node = devices_per_node * FAILURES_PER_DEVICE_HOUR
    write = checkpoint_write_s(checkpoint_bytes, nodes, node_network_gbits)
    restart = PROVISION_S + write  # reading back is as fast as writing
    notice = NOTICE_S.get(cloud, 30.0)
    fits = write <= notice
    loss_rate = nodes * (fail_node + (0.0 if fits else spot_node)) / 3600  # per second
    safe_rate = nodes * (spot_node if fits else 0.0) / 3600
    mtbf = 1 / loss_rate
    tau = daly_interval(write, mtbf)
    useful_s = useful_hours * 3600
    daly = daly_wall(useful_s, tau, write, restart, mtbf)
    load = safe_rate * (write + restart)
    feasible = load < MAX_SAFE_LOAD and math.isfinite(daly)
    wall = daly / (1 - load) if feasible else math.inf
    if useful_s < MIN_EFFICIENCY * wall:
        feasible, wall = False, math.inf
    return Reliability(spot_node, fail_node, nodes, notice, write, restart, fits, tau, mtbf / 3600,
                       useful_hours, daly / 3600, wall / 3600, feasible)  # fmt: skip


def storage_usd(cloud: str, checkpoint_bytes: float, wall_hours: float) -> float:
    """Object storage for the kept checkpoints over the run."""
    return KEEP_LAST * checkpoint_bytes / 1e9 * STORAGE_USD_PER_GB_MONTH[cloud] * wall_hours / HOURS_PER_MONTH
