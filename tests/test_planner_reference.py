"""`trainfleet plan` held against a deliberately naive reference planner written here, in the test.

The reference reads catalog rows as plain CSV (infra/catalog/data/offers.csv, or the rows of a small
catalog written below) and enumerates every (row, spot/on-demand, node count) by brute force. Prices,
zones, node counts, spot vs on-demand, the interruption/checkpoint model and the cost arithmetic are
written out here from the documentation (README "Planning", the docstrings of cli/planner/reliability.py,
optimizer.py and workload.py, and infra/checkpoint_layout.py's account of where DeepSpeed 0.19 puts a
checkpoint's bytes), not taken from the optimizer, reliability or layout code. Only what is checked elsewhere
is borrowed: tokens/s of one DeepSpeed setup (throughput.step, tests/test_planner_calibration.py) and whether
it fits memory (memory.estimate, tests/test_planner_memory.py). Every setup that fits is priced (its checkpoint
lies over the nodes by its ZeRO stage and layout), and each plan takes the one with the least wall time.

tests/test_planner_optimizer.py uses `reference_plans` as the oracle of its brute-force property test.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli.planner import memory, throughput
from cli.planner.calibration import default_fit
from cli.planner.memory import SHARDINGS
from cli.planner.presets import PRESETS
from cli.planner.throughput import Hardware
from cli.planner.workload import Workload
from tests.conftest import REPO, run_trainfleet

CATALOG_DATA = REPO / "infra" / "catalog" / "data"

# --- the model, as documented ----------------------------------------------------------------------------
# The search space (optimizer.py docstring): these node counts up to --max-nodes, plus --max-nodes itself.
NODE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
MOST_MICRO_BATCH = 64  # sequences per device per micro-step
MAX_MICRO_BATCH_TOKENS = 65536  # the calibration table's largest micro-batch
DEEPSPEED_CANNOT_DRIVE = {"Trainium1", "Trainium2", "Qualcomm-AI100", "Radeon-MI25"}  # need their own SDKs
# reliability.py docstring: AWS Spot Advisor bucket midpoints per month, >20% taken as 25%, unknown as >20%.
MONTHLY_INTERRUPTED_SHARE = {0: 0.025, 1: 0.075, 2: 0.125, 3: 0.175, 4: 0.25}
FAILURES_PER_DEVICE_HOUR = 5e-5  # failure_rates.md: between MegaScale's 1-2e-5 and Aegis' 1-2e-4
# Evaluation: 10 forward-only batches every 1,000 steps (Megatron-LM's GPT-3 175B example, evaluation_cadence.md); a
# forward pass is 2 of the 6 FLOPs per parameter and token a step computes, 2 of 8 when it recomputes its forward.
EVAL_ITERS_PER_STEP = 10 / 1000
NOTICE_SECONDS = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
PROVISION_SECONDS = 900.0
# checkpoint_io.md's conservative rates: local NVMe save, upload per node (never over half the node's network)
LOCAL_SAVE_GB_PER_S = 2.0
UPLOAD_GB_PER_S = {"aws": 1.0, "gcp": 0.35, "azure": 0.35}
COMMIT_SECONDS = 10.0
STORAGE_USD_PER_GB_MONTH = {"aws": 0.023, "gcp": 0.020, "azure": 0.018}
CHECKPOINTS_KEPT = 3
HOURS_PER_MONTH = 730.0
TEN_YEARS_HOURS = 10 * 8766.0  # the CLI refuses plans longer than this (a stack file cannot hold them)


@dataclass(frozen=True)
class Job:
    workload: Workload
    clouds: frozenset[str] | None = None
    regions: frozenset[str] | None = None
    max_nodes: int = 64
    deadline_hours: float | None = None
    budget_usd: float | None = None
    purchase: str = "any"
    objective: str = "cost"
    time_value_usd_per_hour: float = 0.0


@dataclass(frozen=True)
class RefPlan:
    cloud: str
    region: str
    zones: tuple[str, ...]
    instance_type: str
    purchase: str
    nodes: int
    price_usd_per_node_hour: float
    wall_hours: float
    cost_usd: float

    def identity(self) -> tuple:
        first_zone = self.zones[0] if self.zones else ""
        return (self.cloud, self.region, first_zone, self.zones, self.instance_type, self.purchase, self.nodes)

    def score(self, job: Job) -> tuple[float, ...]:
        if job.objective == "time":
            return (self.wall_hours, self.cost_usd)
        return (self.cost_usd + job.time_value_usd_per_hour * self.wall_hours, self.wall_hours)


def number(text: str | float | None) -> float | None:
    """A CSV cell: '' (or None) is unknown."""
    return None if text in ("", None) else float(text)


def read_rows(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open(newline="")))


def peak_tflops_table() -> dict[tuple[str, str], float]:
    """(accelerator, precision) -> dense peak TFLOP/s, straight from accelerators.csv."""
    out = {}
    for row in read_rows(CATALOG_DATA / "accelerators.csv"):
        for column, value in row.items():
            if column.startswith("peak_") and column.endswith("_tflops") and value:
                out[(row["name"], column[len("peak_") : -len("_tflops")])] = float(value)
    return out


PEAKS = peak_tflops_table()


def hardware(row: dict, precision: str) -> Hardware | None:
    per_node, device_gib = number(row["accelerators_per_node"]), number(row["accelerator_memory_gib"])
    peak = PEAKS.get((row["accelerator"], precision))
    if not per_node or per_node < 1 or not device_gib or not peak:
        return None
    return Hardware(row["accelerator"], peak, int(per_node), device_gib, number(row["memory_gib"]) or 0.0,
                    number(row["vcpus"]) or 0.0, number(row["network_gbps"]), row.get("fabric", ""))  # fmt: skip


@dataclass(frozen=True)
class RefSetup:
    tokens_per_s: float
    step_s: float
    zero_stage: int
    tp: int
    pp: int
    eval_s: float = 0.0  # evaluation per step, averaged over the cadence


def fitting_setups(w: Workload, hw: Hardware, nodes: int) -> list[RefSetup]:
    """Every DeepSpeed setup that fits, trying every one (no early exits): every ZeRO stage and offload,
    recompute, micro batch and (tensor, pipeline) layout DeepSpeed 0.19.8 trains. Its own code says which:
    runtime/pipe/engine.py asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism". Tensor
    parallelism stays in a node and splits the heads (query and key/value) and the MLP's columns; pipeline stages
    are whole nodes holding at least a layer; both together (the trainer's own layers, sequence parallel, so the
    sequence must split over the tensor ranks). Setups alike in speed, step time,
    ZeRO stage and layout are listed once."""
    devices = hw.devices_per_node * nodes
    layouts = [(tp, pp) for tp in (1, 2, 4, 8) for pp in range(1, nodes + 1)
               if hw.devices_per_node % tp == 0 and w.shape.heads % tp == 0
               and w.shape.key_value_heads % tp == 0 and w.shape.ffn % tp == 0
               and (tp == 1 or pp == 1 or w.seq_len % tp == 0)
               and nodes % pp == 0 and pp <= w.shape.layers]  # fmt: skip
    out = set()
    for tp, pp in layouts:
        data_parallel = devices // (tp * pp)
        for sharding in SHARDINGS:
            if pp > 1 and sharding.zero_stage >= 2:
                continue
            for checkpointing in (False, True):
                for mb in range(1, MOST_MICRO_BATCH + 1):
                    # DeepSpeed trains batch == mb x accumulation x data parallel: each rank an equal whole share,
                    # in whole micro batches
                    sequences = w.global_batch_tokens // w.seq_len
                    if sequences % data_parallel or (sequences // data_parallel) % mb:
                        continue
                    if mb > 1 and mb * w.seq_len > MAX_MICRO_BATCH_TOKENS:
                        continue
                    fits = memory.estimate(w, sharding, mb, checkpointing, hw.device_memory_gib,
                                           hw.devices_per_node, nodes, hw.host_memory_gib, tp=tp, pp=pp).fits  # fmt: skip
                    if fits:
                        st = throughput.step(w, hw, nodes, sharding, mb, checkpointing, default_fit(), tp=tp, pp=pp)
                        forward_s = st.grad_accum * st.compute_s * (2 / 8 if checkpointing else 2 / 6)
                        out.add(RefSetup(st.tokens_per_second, st.step_s, sharding.zero_stage, tp, pp,
                                         EVAL_ITERS_PER_STEP * forward_s))  # fmt: skip
    return sorted(out, key=lambda s: (-s.tokens_per_s, s.step_s, s.zero_stage, s.tp, s.pp))


def checkpoint_bytes(w: Workload) -> float:
    """16-bit weights + fp32 master, Adam m and v = 14 bytes per trained parameter; LoRA trains adapters
    on q, k, v, o of every layer, 2 x rank x hidden parameters each. What checkpoint storage is priced on."""
    shape = w.shape
    trained = shape.params if w.method == "full" else 4 * 2 * w.lora_rank * shape.hidden * shape.layers
    return 14.0 * trained


SMALL_FILE = 16 * 1024  # a model-states file with no tensors in it (ZeRO-3's per rank, a pipeline stage's)


def checkpoint_parts(w: Workload, setup: RefSetup, nodes: int, ranks_per_node: int) -> tuple[float, ...]:
    """(the largest part a node saves, the most a node restores, what all nodes restore, the whole checkpoint, the
    largest single file, how many nodes save the largest part, what each other node saves).

    LoRA: the adapters split evenly, files unknown. Full training, DeepSpeed 0.19 (infra/checkpoint_layout.py's
    docstring): every rank writes its 1/world share of the fp32 master weights and Adam's moments (12 bytes/param),
    so 12 P / nodes per node. The 16-bit weights (2 bytes/param; 4 in fp32) are written by data-parallel rank 0
    alone: without a pipeline, the whole model on node 0 (ranks 0..tp-1, one file of P / tp each); with pp stages,
    each stage's P / pp (a file per layer and tensor rank, and a small model-states file per tensor rank) on the
    first node of the stage; ZeRO-3
    writes none, but a small model-states file per rank. Without ZeRO (stage 0) nothing is sharded: DeepSpeed
    0.19.8's engine.py `_do_optimizer_sanity_check` keeps fp32's torch optimizer and wraps fp16 and bf16 in
    FP16_Optimizer (grad_accum_dtype defaults to the model's, `get_data_types`), whose whole state (fp32 master +
    Adam m, v = 12 bytes/param; fp32: Adam alone, 8) data-parallel rank 0 writes into its model-states file beside
    the weights; only a bf16 pipeline takes BF16_Optimizer, sharded as above. A node restores its own part and every
    other node's model-states files (every rank loads them), of a pipeline only its own stage's layers (every layer
    when there are no optimizer shards to say which stage a node holds: templates/agent/PROTOCOL.md), never another
    rank's optimizer shard."""
    if w.method == "lora":
        whole = checkpoint_bytes(w)
        return whole / nodes, whole / nodes, whole, whole, 0.0, nodes, whole / nodes
    params = w.shape.params
    weight = 4 if w.precision == "fp32" else 2  # fp8 trains with bf16 on
    bf16 = w.precision in ("bf16", "fp8")
    unsharded = setup.zero_stage == 0 and not (bf16 and setup.pp > 1)
    in_model_states = (8 if w.precision == "fp32" else 12) * params if unsharded else 0.0  # the whole optimizer
    shards = 0.0 if unsharded else 12 * params / nodes
    shard_file = shards / ranks_per_node
    if setup.zero_stage == 3:
        part = shards + ranks_per_node * SMALL_FILE
        return part, part, part * nodes, part * nodes, shard_file, nodes, part
    if setup.pp == 1:
        model = weight * params + in_model_states
        return (model + shards, model + shards, nodes * (model + shards), model + nodes * shards,
                max(model / setup.tp, shard_file), 1, shards)  # fmt: skip
    stage = weight * params / setup.pp  # one stage's layers
    ranks = setup.pp * setup.tp  # one model-states file each
    states_file = in_model_states / ranks or SMALL_FILE
    # its stage's layers, found by the optimizer shards its ranks hold; with none, every layer (PROTOCOL.md)
    restored = shards + (weight * params if unsharded else stage) + ranks * states_file
    layer_file = stage / (w.shape.layers // setup.pp) / setup.tp
    return (stage + setup.tp * states_file + shards, restored, nodes * restored,
            nodes * shards + weight * params + ranks * states_file, max(layer_file, shard_file, states_file),
            setup.pp, shards)  # fmt: skip


def shared_account_s(large: float, large_nodes: int, small: float, nodes: int, node_rate: float, account: float) -> float:
    """Seconds until `large_nodes` nodes of `large` GB and the other nodes of `small` GB are through one account of
    `account` GB/s, shared evenly by the nodes still moving, each at most `node_rate`: all move until the small
    parts are in, then the large ones alone."""
    if large_nodes == nodes or small >= large:
        return large / min(node_rate, account / nodes)
    together = small / min(node_rate, account / nodes)
    return together + (large - small) / min(node_rate, account / large_nodes)


def capacity_wait_seconds(nodes: int) -> float:
    """capacity.py's docstring, with no placement score measured: the published spot traces' mean wait, 205 min
    (12,280 s) for one node times N^0.188, whatever the instance size (tests/test_capacity_traces.py)."""
    return 12_280.0 * math.exp(0.188 * math.log(nodes))


def spot_nodes_per_event(nodes: int) -> float:
    """capacity.py: one interruption event takes 1 node of 1, 1.28 of 4 or more, linearly between."""
    return 1.0 + 0.28 * (min(nodes, 4) - 1) / 3


HELD_WHILE_WAITING = 0.079  # capacity.py: the traces held 7.9% of the nodes while waiting to start; that bills


def expected_wall_hours(useful_hours: float, nodes: int, hw: Hardware, cloud: str, spot: bool,
                        bucket: float | None, parts: tuple[float, ...], step_s: float,
                        eval_s: float = 0.0) -> tuple | None:  # fmt: skip
    """(wall hours, billed hours): Daly's expected wall time, spot interruptions and failures included
    (reliability.py's docstring); None when the plan is refused (restarts would take half the time, or useful work
    under a third of the running time, the start wait left out). A spot fleet waits for a full set of nodes before the start and in every restart (capacity.py),
    holding and paying for 7.9% of them before the start; its nodes are interrupted together, a few per event. `eval_s`: the evaluation run beside each step (seconds per step)."""
    share = MONTHLY_INTERRUPTED_SHARE[4 if bucket is None else int(bucket)]
    spot_per_node_hour = -math.log(1 - share) / HOURS_PER_MONTH / spot_nodes_per_event(nodes) if spot else 0.0
    failures_per_node_hour = hw.devices_per_node * FAILURES_PER_DEVICE_HOUR
    # The node protocol: each node saves its part locally (the trainer blocks until the largest is saved), its
    # agent uploads it; on a notice the step in flight finishes first; rank 0 commits once all parts are in. A
    # restore fetches what each node needs at the same rates and loads it at the local rate.
    saved, restored, restored_all, whole, largest_file, saved_nodes, small = (b / 1e9 for b in parts)
    node_rate = UPLOAD_GB_PER_S[cloud]
    if cloud == "gcp" and nodes > 35:
        node_rate = 0.19
    if hw.network_gbits:
        node_rate = min(node_rate, hw.network_gbits / 8 / 2)
    upload, download = saved / node_rate, restored / node_rate
    if cloud == "aws":  # one file: 8 requests in flight (the agent's concurrency) at S3's 85 MB/s each
        one_file = largest_file / min(node_rate, 8 * 0.085)
        upload, download = max(upload, one_file), max(download, one_file)
    if cloud == "azure":  # one storage account's 60 Gbit/s in and 200 Gbit/s out, shared by the nodes moving
        upload = max(upload, shared_account_s(saved, round(saved_nodes * 1e9), small, nodes, node_rate, 7.5))
        download = max(download, restored_all / nodes / min(node_rate, 25.0 / nodes))  # every node restores as much
    d = saved / LOCAL_SAVE_GB_PER_S  # seconds the trainer blocks per checkpoint
    waiting = capacity_wait_seconds(nodes) if spot else 0.0
    restart = PROVISION_SECONDS + waiting + download + restored / LOCAL_SAVE_GB_PER_S  # replace, fetch, load
    emergency = step_s + d + upload + COMMIT_SECONDS
    noticed = emergency <= NOTICE_SECONDS[cloud]  # an emergency checkpoint fits the notice: no work lost
    lossy_per_s = nodes * (failures_per_node_hour + (0.0 if noticed else spot_per_node_hour)) / 3600
    safe_per_s = nodes * (spot_per_node_hour if noticed else 0.0) / 3600
    m = 1 / lossy_per_s
    tau = m if d >= 2 * m else math.sqrt(2 * d * m) * (1 + math.sqrt(d / (2 * m)) / 3 + d / (18 * m)) - d
    useful_s = useful_hours * 3600
    try:
        worked_s = useful_s * (1 + eval_s / step_s)  # the steps and the evaluation beside them
        lossy_restart = restart + upload + COMMIT_SECONDS  # the step not yet durable is lost too
        daly_s = m * math.exp(lossy_restart / m) * (math.exp((tau + d) / m) - 1) * worked_s / tau
    except OverflowError:
        return None
    load = safe_per_s * (emergency + restart)
    if load >= 0.5 or not math.isfinite(daly_s):
        return None
    wall_s = daly_s / (1 - load) + waiting
    if useful_s < (wall_s - waiting) / 3:  # the wait for the first full set is not running time
        return None
    return wall_s / 3600, (wall_s - (1 - HELD_WHILE_WAITING) * waiting) / 3600


def least_wall_hours(w: Workload, setups: list[RefSetup], nodes: int, hw: Hardware, cloud: str, spot: bool,
                     bucket: float | None) -> tuple | None:  # fmt: skip
    """The least expected wall time (None: every one is refused) of the fastest setup of each checkpoint split
    (optimizer.py's docstring: setups whose checkpoints lie alike, to the megabyte, differ only in speed and
    step time, and the fastest is best). Storage is priced on the workload's bytes whatever the setup, so at
    every price the shortest run is the cheapest too."""
    fastest: dict[tuple, tuple[RefSetup, tuple[float, ...]]] = {}
    for s in setups:  # fastest first
        parts = checkpoint_parts(w, s, nodes, hw.devices_per_node)
        fastest.setdefault(tuple(round(b / 1e6) for b in (parts[0], parts[1], parts[3])), (s, parts))
    walls = [expected_wall_hours(w.tokens / s.tokens_per_s / 3600, nodes, hw, cloud, spot, bucket, parts, s.step_s,
                                 s.eval_s) for s, parts in fastest.values()]  # fmt: skip
    return min((h for h in walls if h is not None), default=None)  # the least wall time bills the least too


# --- the reference planner -------------------------------------------------------------------------------


def allowed(row: dict, job: Job, local_zones: bool = False) -> bool:
    aws_local_zone = row["cloud"] == "aws" and row["zone"].count("-") >= 2  # use1-atl2-az1: opt-in only
    return (
        (job.clouds is None or row["cloud"] in job.clouds)
        and (job.regions is None or row["region"] in job.regions)
        and (local_zones or not aws_local_zone)
        and row["accelerator"] not in DEEPSPEED_CANNOT_DRIVE
    )


HARDWARE_COLUMNS = ("accelerator", "accelerators_per_node", "accelerator_memory_gib", "vcpus", "memory_gib",
                    "network_gbps")  # fmt: skip


def reservation_only(row: dict) -> bool:
    """GCP runs A4X, A4 and A3 Ultra only reservation-bound, flex-start or spot, never on demand
    (https://cloud.google.com/compute/docs/instances/about-reservation-bound-vms)."""
    return row["cloud"] == "gcp" and row["instance_type"].split("-")[0] in ("a4", "a4x") or (
        row["cloud"] == "gcp" and row["instance_type"].startswith("a3-ultragpu")
    )


def spot_price(row: dict, rows: list[dict]) -> float:
    """outliers.py's docstring: a spot row under half the median of the same type's other zones in its region
    is priced at that median."""
    own = number(row["spot_usd_per_hour"])
    others = sorted(number(r["spot_usd_per_hour"]) for r in rows
                    if (r["cloud"], r["region"], r["instance_type"]) == (row["cloud"], row["region"], row["instance_type"])
                    and r["zone"] != row["zone"] and number(r["spot_usd_per_hour"]))  # fmt: skip
    if not others:
        return own
    mid = len(others) // 2
    median = others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2
    return median if median >= 2 * own else own


def price_points(rows: list[dict], purchase: str) -> list[tuple[dict, str, tuple[str, ...], float]]:
    """(row, purchase, zones, USD per node-hour): spot is priced per zone, so every row with a spot price
    is its own point; on-demand is priced per region, one point per (cloud, region, type) over its zones."""
    points = []
    if purchase in ("spot", "any"):
        # optimizer.py's price_points docstring: AWS per zone, plus one node in any zone of the region at the
        # dearest zone's price; GCP in any zone of the region; Azure per region (no zones).
        spot_rows = [r for r in rows if number(r["spot_usd_per_hour"])]
        places: dict[tuple, list[dict]] = {}
        for r in spot_rows:
            places.setdefault((r["cloud"], r["region"], r["instance_type"], r["interruption_bucket"]), []).append(r)
        for group in places.values():
            group = sorted(group, key=lambda r: r["zone"])
            priced = [(r, spot_price(r, rows)) for r in group]
            if group[0]["cloud"] != "gcp":
                points += [(r, "spot", (r["zone"],) if r["zone"] else (), price) for r, price in priced]
            if group[0]["cloud"] == "gcp" or (group[0]["cloud"] == "aws" and len(group) > 1):
                top = max(price for _, price in priced)
                first_dearest = next(r for r, price in priced if price == top)
                points.append((first_dearest, "spot", tuple(r["zone"] for r in group), top))
    if purchase in ("on-demand", "any"):
        regional: dict[tuple, list[dict]] = {}
        for r in rows:
            if number(r["on_demand_usd_per_hour"]) and not reservation_only(r):
                regional.setdefault((r["cloud"], r["region"], r["instance_type"]), []).append(r)
        for group in regional.values():
            (price,) = {number(r["on_demand_usd_per_hour"]) for r in group}  # one regional price
            assert len({tuple(r[c] for c in HARDWARE_COLUMNS) for r in group}) == 1, "one type, one hardware"
            zones = tuple(sorted(r["zone"] for r in group if r["zone"]))
            points.append((group[0], "on-demand", zones, price))
    return points


def reference_plans(rows: list[dict], job: Job, max_hours: float = TEN_YEARS_HOURS) -> list[RefPlan]:
    """Every plan meeting the job's bounds, best first (ties: the lexically first cloud, region, zone...)."""
    w = job.workload
    ckpt = checkpoint_bytes(w)
    counts = sorted({n for n in NODE_COUNTS if n <= job.max_nodes} | {job.max_nodes})
    setups: dict[tuple, list[RefSetup]] = {}  # (hardware, nodes) -> every setup that fits, a memo
    walls: dict[tuple, tuple | None] = {}  # (hardware, nodes, cloud, spot, bucket) -> least (wall, billed) hours
    plans = []
    for row, purchase, zones, price in price_points([r for r in rows if allowed(r, job)], job.purchase):
        hw = hardware(row, w.precision)
        if hw is None:
            continue
        for nodes in counts:
            if purchase == "spot" and row["cloud"] == "aws" and nodes > 1 and len(zones) > 1:
                continue  # several AWS nodes share a cluster placement group: one zone
            if (hw, nodes) not in setups:
                setups[hw, nodes] = fitting_setups(w, hw, nodes)
            if not setups[hw, nodes]:
                continue
            key = (hw, nodes, row["cloud"], purchase == "spot", number(row["interruption_bucket"]))
            if key not in walls:
                walls[key] = least_wall_hours(w, setups[hw, nodes], nodes, hw, *key[2:])
            if walls[key] is None:
                continue
            wall, billed = walls[key]
            if wall > max_hours:
                continue
            kept_gb_months = CHECKPOINTS_KEPT * ckpt / 1e9 * wall / HOURS_PER_MONTH
            cost = price * nodes * billed + kept_gb_months * STORAGE_USD_PER_GB_MONTH[row["cloud"]]
            if job.deadline_hours is not None and wall > job.deadline_hours:
                continue
            if job.budget_usd is not None and cost > job.budget_usd:
                continue
            # CreateAutoScalingGroup: a cluster placement group (several AWS nodes) lives in one zone; the first.
            where = zones[:1] if row["cloud"] == "aws" and nodes > 1 else zones
            plans.append(RefPlan(row["cloud"], row["region"], where, row["instance_type"], purchase, nodes,
                                 price, wall, cost))  # fmt: skip
    return sorted(plans, key=lambda p: (p.score(job), p.identity()))


def offer_rows(offers) -> list[dict]:
    """Catalog `Offer` objects as the CSV rows they were read from (for in-memory catalogs)."""

    def cell(value):
        return "" if value is None else str(value)

    return [{f: cell(getattr(o, f)) for f in CSV_COLUMNS} for o in offers]


CSV_COLUMNS = next(csv.reader((CATALOG_DATA / "offers.csv").open()))


# --- catalogs and jobs -----------------------------------------------------------------------------------
# Small catalogs in made-up regions, written as a refreshed-catalog overlay the CLI reads, so `--regions`
# picks exactly these rows. Each is built so a wrong plan costs visibly more: zones of one region price
# spot differently (the first zone is not the cheapest), and interruption buckets differ per zone.
SMALL_CATALOGS = {
    "aws": """\
aws,tfref-east-1,tfe1-az1,ref.g6e.2xlarge,L40S,1,44.7031,8,64,2.36256,0.52,0,aws-spot-advisor,,,test,
aws,tfref-east-1,tfe1-az2,ref.g6e.2xlarge,L40S,1,44.7031,8,64,2.36256,0.3315,4,aws-spot-advisor,,,test,
aws,tfref-east-1,tfe1-az3,ref.g6e.2xlarge,L40S,1,44.7031,8,64,2.36256,0.41,1,aws-spot-advisor,,,test,
aws,tfref-east-1,tfe1-az1,ref.p4de.24xlarge,A100-80GB,8,80,96,1152,40.96,16.2,2,aws-spot-advisor,400,efa,test,
aws,tfref-east-1,tfe1-az2,ref.p4de.24xlarge,A100-80GB,8,80,96,1152,40.96,12.1,4,aws-spot-advisor,400,efa,test,
aws,tfref-east-1,tfe1-az3,ref.p4de.24xlarge,A100-80GB,8,80,96,1152,40.96,,,,400,efa,test,
aws,tfref-east-1,tfe1-az1,ref.p5.48xlarge,H100-80GB,8,80,192,2048,98.32,41.0,3,aws-spot-advisor,3200,efa,test,
aws,tfref-east-1,tfe1-az3,ref.p5.48xlarge,H100-80GB,8,80,192,2048,98.32,33.5,,,3200,efa,test,
""",
    "gcp": """\
gcp,tfref-central1,tfref-central1-a,ref-g2-standard-8,L4,1,24,8,32,0.85,0.36,2,assumed-interruption,,,test,
gcp,tfref-central1,tfref-central1-b,ref-g2-standard-8,L4,1,24,8,32,0.85,0.29,2,assumed-interruption,,,test,
gcp,tfref-central1,tfref-central1-a,ref-a2-ultragpu-8g,A100-80GB,8,80,96,1360,40.22,12.6,2,assumed-interruption,100,,test,
gcp,tfref-central1,tfref-central1-c,ref-a2-ultragpu-8g,A100-80GB,8,80,96,1360,40.22,11.9,2,assumed-interruption,100,,test,
gcp,tfref-central1,tfref-central1-b,ref-a3-highgpu-8g,H100-80GB,8,80,208,1872,88.25,29.1,2,assumed-interruption,800,gpudirect-tcpx,test,
""",
    "azure": """\
azure,tfrefwest,,Ref_NC24ads_A100_v4,A100-80GB,1,80,24,220,3.67,1.1,2,assumed-interruption,,,test,
azure,tfrefwest,,Ref_ND96amsr_A100_v4,A100-80GB,8,80,96,1924,32.77,13.9,2,assumed-interruption,1600,infiniband,test,
azure,tfrefwest,,Ref_NC16as_T4_v3,T4,1,16,16,110,1.204,0.143517,2,assumed-interruption,,,test,
""",
}
SMALL_REGIONS = {"aws": "tfref-east-1", "gcp": "tfref-central1", "azure": "tfrefwest"}
# The embedded catalog, one region at a time so the brute force stays quick. eu-south-2 prices g6e.2xlarge
# spot at $0.3315 in its first zone and $0.2944 in the next.
EMBEDDED_REGIONS = {"aws": "eu-south-2", "gcp": "us-central1", "azure": "eastus"}

# (name, CLI arguments, the same job for the reference)
JOBS = {
    "mpt-1b spot": (["--model", "mpt-1b", "--tokens", "10B", "--purchase", "spot"],
                    dict(model="mpt-1b", tokens=10**10, purchase="spot")),
    "llama-7b 200B in 72 h": (["--model", "llama-7b", "--tokens", "200B", "--deadline", "72h"],
                              dict(model="llama-7b", tokens=200 * 10**9, deadline_hours=72.0)),
    "llama-7b LoRA": (["--model", "llama-7b", "--tokens", "1B", "--method", "lora"],
                      dict(model="llama-7b", tokens=10**9, method="lora")),
    "llama-13b budget": (["--model", "llama-13b", "--tokens", "20B", "--budget", "9000"],
                         dict(model="llama-13b", tokens=20 * 10**9, budget_usd=9000.0)),
    "llama-7b on-demand": (["--model", "llama-7b", "--tokens", "20B", "--purchase", "on-demand"],
                           dict(model="llama-7b", tokens=20 * 10**9, purchase="on-demand")),
    "fastest on 7 nodes": (["--model", "mpt-7b", "--tokens", "50B", "--objective", "time", "--max-nodes", "7"],
                           dict(model="mpt-7b", tokens=50 * 10**9, objective="time", max_nodes=7)),
    "time valued": (["--model", "mpt-3b", "--tokens", "30B", "--time-value", "40"],
                    dict(model="mpt-3b", tokens=30 * 10**9, time_value_usd_per_hour=40.0)),
}  # fmt: skip


def job_for(region: str, model: str, tokens: int, method: str = "full", **bounds) -> Job:
    # The CLI's default global batch at 2,048-token sequences: 2,048 sequences (2^22 tokens) for full training,
    # 128 (2^18) for LoRA.
    batch = 2048 * 2048 if method == "full" else 128 * 2048
    w = Workload(PRESETS[model], tokens, method=method, global_batch_tokens=batch)
    return Job(w, regions=frozenset({region}), **bounds)


@pytest.fixture(scope="module")
def small_catalog_home(tmp_path_factory) -> Path:
    """A TRAINFLEET_HOME whose catalog overlay adds the small catalogs' rows to the embedded ones."""
    home = tmp_path_factory.mktemp("reference-catalogs")
    header = ",".join([*CSV_COLUMNS, "as_of"])
    body = "".join(line + ",2025-01-01\n" for text in SMALL_CATALOGS.values() for line in text.splitlines())
    (home / "catalog-overlay.csv").write_text(header + "\n" + body)
    return home


def small_rows(cloud: str) -> list[dict]:
    return list(csv.DictReader(SMALL_CATALOGS[cloud].splitlines(), fieldnames=CSV_COLUMNS))


def embedded_rows() -> list[dict]:
    return read_rows(CATALOG_DATA / "offers.csv")


def assert_plan_matches_reference(args: list[str], rows: list[dict], job: Job, home: Path | None) -> None:
    result = run_trainfleet("plan", *args, "--regions", next(iter(job.regions)), "--json",
                            env={"TRAINFLEET_HOME": str(home)} if home else None)  # fmt: skip
    expected = reference_plans(rows, job)
    if not expected:
        assert result.code == 2, f"the reference finds no plan, the CLI printed {result.stdout[:300]}"
        return
    assert result.code == 0, result.stderr
    best, want = result.json()["best"], expected[0]
    got = (best["cloud"], best["region"], tuple(best["zones"]), best["instance_type"], best["purchase"],
           best["nodes"])  # fmt: skip
    assert got == (want.cloud, want.region, want.zones, want.instance_type, want.purchase, want.nodes), (
        f"reference best: {want}"
    )
    assert best["price_usd_per_node_hour"] == pytest.approx(want.price_usd_per_node_hour, abs=1e-6)
    assert best["wallclock_hours"] == pytest.approx(want.wall_hours, abs=6e-4)
    assert best["expected_cost_usd"] == pytest.approx(want.cost_usd, abs=6e-3)


@pytest.mark.parametrize("job_name", sorted(JOBS))
@pytest.mark.parametrize("cloud", sorted(SMALL_CATALOGS))
def test_plan_matches_reference_on_small_catalogs(cloud, job_name, small_catalog_home):
    args, job = JOBS[job_name]
    assert_plan_matches_reference(args, small_rows(cloud), job_for(SMALL_REGIONS[cloud], **job),
                                  small_catalog_home)  # fmt: skip


@pytest.mark.parametrize("job_name", sorted(JOBS))
@pytest.mark.parametrize("cloud", sorted(EMBEDDED_REGIONS))
def test_plan_matches_reference_on_embedded_catalog(cloud, job_name):
    args, job = JOBS[job_name]
    assert_plan_matches_reference(args, embedded_rows(), job_for(EMBEDDED_REGIONS[cloud], **job), None)
