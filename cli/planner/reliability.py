"""What whole runs lose beyond step throughput: spot interruptions, failures, checkpoints, restarts.

Hazards (events per hour):
  spot, per node   = -ln(1 - p) / 730 h, p = the catalog's monthly interruption share (AWS Spot Advisor
                     bucket midpoints 2.5/7.5/12.5/17.5%, >20% taken as 25%; GCP/Azure publish none and
                     carry the catalog's labelled assumption; unknown buckets are taken as >20%)
  failure, per node = devices x FAILURES_PER_DEVICE_HOUR, spot or not (failure_rates.csv/.md beside the
                     catalog's calibration data: MegaScale's >100 restarts on >10k GPUs over weeks is 1-2e-5;
                     Alibaba's Aegis and ByteDance's fleet 1-2e-4; 5e-5 taken, the conservative middle)
  job              = nodes x failure hazard + spot nodes x spot hazard / nodes_lost_per_event(spot nodes): spot
                     interruptions in one type and zone come together (capacity.py: 1.28 nodes per event from 4
                     up, the least published AWS preemption traces show), each event one restart
Checkpoints follow the node's protocol (templates/agent: every node saves its own part, its agent uploads
it while training goes on, node rank 0 commits the manifest; on a restore every node downloads its own part
and the other parts' files its ranks load: every model-states file, and of a pipeline its own stage's layers).
Parts are not equal (`CheckpointParts`, from infra/checkpoint_layout.py's DeepSpeed 0.19 layout for the plan's
ZeRO stage, precision, TP x PP, node count, GPUs per node and layers; past MAX_LAYOUT_RANKS ranks, that layout on
fewer nodes with each rank's optimizer shard scaled): under ZeRO-0/1/2 data-parallel rank 0 alone writes the whole
16-bit model beside its optimizer shards, and every rank loads it (at 70B bf16 ZeRO-1 on 64 x 8 GPUs node 0 saves
140e9 + 12 x 70e9 x 8 / 512 = 153 GB of 980 GB, and every node restores 153 GB). The slowest node decides, so with
S = the largest part any node saves and D = the most any node restores (LoRA: the adapters split evenly,
S = D = checkpoint bytes / nodes):
  periodic checkpoint  the trainer blocks only for the local save: d = S / LOCAL_SAVE_GBPS; the step becomes
                       durable upload (S at the node's rate) + commit later (that lag is lost too when a failure
                       strikes before it)
  emergency checkpoint on a notice: wait for the step boundary (up to one step) + save + upload + commit
  restart              provisioning a replacement + waiting for spot capacity (capacity.py) + downloading D at
                       the upload rate (no per-node download figure is calibrated) + loading D at LOCAL_SAVE_GBPS
Per-node upload rates are the calibration data's conservative figures (checkpoint_io.csv/.md: S3 1 GB/s as
Mountpoint measured for one file; GCS 0.35 GB/s, 0.19 GB/s beyond 35 nodes, as Dataflux measured; Azure 0.35
GB/s with no per-VM measurement), never more than half the node's network; on Azure every part goes through one
storage account's 60 Gbit/s of ingress, so an upload (and a restore) takes at least all nodes' bytes / 7.5 GB/s.
When the cloud's notice (AWS 120 s, GCP 30 s, Azure 30 s) covers the emergency checkpoint, an interruption loses no
work and costs emergency checkpoint + restart; when it does not, the plan says so and each interruption loses the
work since the last durable checkpoint (up to one interval plus the upload lag), like a failure.
Events that lose work (failures, and spot interruptions whose checkpoint does not fit the notice) are
handled by periodic checkpoints every tau, with Daly's optimum (Young/Daly, higher order):
    tau = sqrt(2 d M) [1 + sqrt(d / 2M) / 3 + d / 18M] - d   (d < 2M; else tau = M),  M = 1 / hazard
and Daly's expected wall time for T hours of work (the steps, plus the evaluation and data-loader stalls the job
runs beside them, cli/planner/overheads.py):
    W = M e^(R/M) (e^((tau + d)/M) - 1) T / tau
Safe interruptions then stretch it by 1 / (1 - hazard_safe (d + R)). A plan whose useful work would be
under a third of its running time is refused as infeasible (it would mostly pay for restarts). The wait for the
first full set of nodes is not running time: counted in, it would refuse a fast setup that a slower one of the
same fleet passes, only because the slower one has more work to set against the same wait.

Elastic recovery (checkpoint.elastic: min_nodes, wait w; infra/elastic.py), on every lost node (spot or failure:
the node side cannot tell them apart). T, the time until a replacement is up, is capacity.py's: T = PROVISION_S +
RETRY_S K, K the failed tries: the first try succeeds with chance q0, each later one q1 (capacity.try_odds; both
q = RETRY_S / (RETRY_S + capacity wait) for a measured score; q = 1: T = PROVISION_S).
S(t) = P(T > t), G(a) = E[min(T, a)] = integral of S from 0 to a, in closed form (`replacement_survival`,
`replacement_expected_min`). The survivors idle until min(T, w); when T <= w the replacement joins as today
(download + load); when T > w they convert to n nodes (the largest usable count below N; c_n = the whole checkpoint
B (every part: restore --resize fetches them all) / one node's download rate + B / UNIVERSAL_CONVERT_BYTES_PER_S + a
load of B / n), train at n/N of full speed until T, then save their parts and convert back (g = save + upload +
commit of the largest part at n nodes, + c_N). The job loses, in full-speed seconds:
    E[loss] = G(w) + (1 - S(w)) (download + load) + S(w) (c_n + g) + (1 - n/N) (E[T] - G(w + c_n))
against PROVISION_S + capacity wait + download + load without; E[loss] stands in for the restart R above (as the
mean capacity wait does without elastic). Every node bills the whole time either way (the price is unchanged, only
the wall time moves). Not modelled: a second loss while shrunk, a different step speed on n nodes than n/N, an
event that takes several nodes at once (elastic recovery is priced per event as for one lost node).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from cli.planner.capacity import RETRY_S, nodes_lost_per_event, try_odds
from infra.catalog.interruption import HOURS_PER_MONTH, WORST_KNOWN, InterruptionRate

# The node's save and upload rates are infra's too (the Azure terminate-notice window is sized by them).
from infra.checkpoint_io import (  # noqa: F401 (re-exported: the planner's tests and benchmarks read them here)
    AGENT_STREAMS_PER_FILE,
    AZURE_ACCOUNT_EGRESS_GBPS,
    AZURE_ACCOUNT_INGRESS_GBPS,
    COMMIT_S,
    GCP_MANY_NODES,
    GCP_MANY_NODES_GBPS,
    LOCAL_SAVE_GBPS,
    S3_CONNECTION_GBPS,
    UPLOAD_GBPS_PER_NODE,
    download_gbps_per_node,
    file_gbps,
    node_upload_gbps,
    part_upload_s,
    upload_gbps_per_node,
)
from infra.checkpoint_layout import CheckpointLayout
from templates.agent.trainfleet_agent.checkpoint_names import LAYER_RE, SHARD_MP_RE, ZERO_SHARD_RE

FAILURES_PER_DEVICE_HOUR = 5e-5
NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
# Regaining a full set of nodes after an interruption or failure: MegaScale (arXiv 2402.15627 sec. 6.3) detects
# in under 10 min and recovers in under 15; Ai2's Olmo run on Lambda B200s took a mean of 38.9 min
# (failure_rates.md). A replacement node boots, installs and rejoins: 15 min taken.
PROVISION_S = 900.0
STORAGE_USD_PER_GB_MONTH = {"aws": 0.023, "gcp": 0.020, "azure": 0.018}  # standard object storage
KEEP_LAST = 3  # checkpoints kept (the schema's default keep_last)
MAX_SAFE_LOAD = 0.5  # refuse plans that would spend half their time restarting
MIN_EFFICIENCY = 1 / 3  # refuse plans where less than a third of the running time (after the start wait) is useful work
# DeepSpeed universal checkpoint conversion (ds_to_universal), bytes of the whole checkpoint per second on one node:
# benchmarks/conversion_rate.py (infra/catalog/data/calibration/conversion_rate.csv): ZeRO-2 bf16 checkpoints of 0.22 to
# 5.03 GiB, 2 workers on a 2-core machine, the fastest of 3 runs each: 2.97 s + bytes / 137 MB/s fitted on all six;
# fitted without the largest it predicted that one 12% too fast (38.9 s against 44.2 s), so the rate carries that much
# doubt. A GPU node runs more workers; nothing here measured one, so this floor stands.
UNIVERSAL_CONVERT_BYTES_PER_S = 137e6


def convert_rate_note(rate: float | None = None) -> str:
    """How the conversion rate in a figure was earned, for every line that shows one."""
    rate = UNIVERSAL_CONVERT_BYTES_PER_S if rate is None else rate
    return (f"{rate / 1e6:,.0f} MB/s universal-checkpoint conversion (measured on a 2-core machine, 0.2-5 GiB; "
            "a fit without the largest came out 12% fast on it)")


def gb(n: float) -> str:
    """Bytes as GB for a line of text: whole GB from 100 GB up, else three figures."""
    return f"{n / 1e9:,.0f}" if n >= 100e9 else f"{n / 1e9:.3g}"


@dataclass(frozen=True, slots=True)
class CheckpointParts:
    """How one checkpoint lies over the nodes that save it, and what each restores: the slowest node decides."""

    nodes: int
    total_bytes: float  # every part together
    saved_bytes: float  # the largest part any node saves (and uploads)
    saved_node: int  # the first node that saves that much
    restored_bytes: float  # the most any node downloads and loads on a restore at the same node count
    restored_total_bytes: float  # what all nodes restore together (they restore at once)
    model_bytes: float  # of the largest part, the model-states files every rank loads; 0 for an even split
    why: str  # what the split rests on, for --explain
    uniform: bool  # every node saves as much
    fetches: str  # what a node restores, for --explain
    # (params, zero stage, precision, tp, pp, ranks per node, layers) of the DeepSpeed layout; None: an even split
    layout: tuple | None = None
    largest_file_bytes: float = 0.0  # the largest single file any node saves or restores
    saved_sizes: tuple[tuple[float, int], ...] = ()  # (bytes, how many nodes save that much)
    restored_sizes: tuple[tuple[float, int], ...] = ()  # (bytes, how many nodes restore that much)

    def resized(self, nodes: int) -> CheckpointParts:
        """The same checkpoint saved by `nodes` nodes."""
        if self.layout is None:
            return even_parts(self.total_bytes, nodes, self.why)
        params, zero_stage, precision, tp, pp, ranks_per_node, layers = self.layout
        return layout_parts(params, zero_stage, precision, tp, pp, nodes, ranks_per_node, layers)

    def explain(self) -> str:
        """One phrase: whose part is the largest, of what, why, and what a restore fetches."""
        if self.layout is None:
            return (f"each node's part {gb(self.saved_bytes)} GB of {gb(self.total_bytes)} GB ({self.why}); each "
                    "node restores its own part")  # fmt: skip
        whose = "each node's part" if self.uniform else f"node {self.saved_node}'s part"
        return (f"{whose} {gb(self.saved_bytes)} GB of {gb(self.total_bytes)} GB: {self.why}; a node restores up to "
                f"{gb(self.restored_bytes)} GB ({self.fetches})")


def even_parts(checkpoint_bytes: float, nodes: int, why: str = "split evenly") -> CheckpointParts:
    """Every node saves and restores 1/nodes of the checkpoint (LoRA's adapters; a checkpoint of unknown layout)."""
    part = checkpoint_bytes / nodes
    # its files are not known, so no one file's rate bounds it (a LoRA adapter's files are small)
    return CheckpointParts(nodes, checkpoint_bytes, part, 0, part, checkpoint_bytes, 0.0, why, True, "its own part",
                           None, 0.0, ((part, nodes),), ((part, nodes),))  # fmt: skip


def restored_per_node(layout: CheckpointLayout) -> tuple[int, ...]:
    """Bytes each node holds after a restore at the same node count, by the agent's needed_files rule
    (templates/agent/trainfleet_agent/checkpoints.py, with its own patterns) summed for every node in one pass: its
    own part, and each other part's files that are not a rank's own shard, a pipeline's layer files only for the
    layers its ranks load (those of the parts that wrote data-parallel rank 0 of one of its model-parallel ranks;
    all of them when the checkpoint does not say). CheckpointLayout.restored_bytes runs needed_files node by node,
    which takes seconds at 1,024 nodes; tests/test_planner_checkpoint_parts.py holds the two equal."""
    nodes, files = layout.nodes, layout.files
    if len({f.path for f in files}) != len(files):  # needed_files keeps one file a path: let it decide
        return layout.restored_bytes
    plain = [0] * nodes  # per node: what it wrote that every other node fetches
    layer_total: dict[str, int] = {}  # layer index -> bytes of its files, every part's
    layer_own: list[dict[str, int]] = [{} for _ in range(nodes)]
    mps: list[set[str]] = [set() for _ in range(nodes)]  # the model-parallel ranks of a node's shards
    writers: dict[str, set[int]] = {}  # model-parallel rank -> the nodes holding its data-parallel rank 0 shard
    layers_of: list[set[str]] = [set() for _ in range(nodes)]
    for f in files:
        mp, data_rank_0, zero_shard, idx = _file_kind(f.path)
        if mp is not None:
            mps[f.node].add(mp)
            if data_rank_0:
                writers.setdefault(mp, set()).add(f.node)
        if zero_shard:
            continue
        if idx is not None:
            layers_of[f.node].add(idx)
            layer_total[idx] = layer_total.get(idx, 0) + f.size
            layer_own[f.node][idx] = layer_own[f.node].get(idx, 0) + f.size
        else:
            plain[f.node] += f.size
    everyone = sum(plain)
    out = []
    for n in range(nodes):
        if layer_total and mps[n]:
            loads = {i for mp in mps[n] for w in writers.get(mp, ()) for i in layers_of[w]}
        else:
            loads = set(layer_total)
        layers = sum(layer_total[i] - layer_own[n].get(i, 0) for i in loads)
        out.append(layout.saved_bytes[n] + everyone - plain[n] + layers)
    return tuple(out)


@lru_cache(maxsize=65536)
def _file_kind(path: str) -> tuple[str | None, bool, bool, str | None]:
    """What the agent's patterns say of a checkpoint file (templates/agent/trainfleet_agent/checkpoints.py): the
    model-parallel rank of an optimizer shard and whether data-parallel rank 0 wrote it; whether it is a rank's own
    ZeRO shard; the index of a pipeline layer file. Cached: layouts of one search repeat their file names."""
    shard, layer = SHARD_MP_RE.search(path), LAYER_RE.search(path)
    return (shard.group(4) if shard else None, bool(shard) and shard.group(3) == "0",
            ZERO_SHARD_RE.search(path) is not None, layer.group(2) if layer else None)  # fmt: skip


# Past this many ranks the files are not enumerated one by one: `layout_parts` takes the same layout on fewer nodes
# and scales each rank's optimizer shard (`scaled_parts`). tests/test_planner_checkpoint_parts.py holds the two equal
# (to a byte in a billion) from 64 ranks up, so the planner's search, which prices some 500 layouts, lists the files of
# at most 8 nodes of each (1.4 s for the quick start's plan, 2.2 s listing up to 2,048 nodes).
MAX_LAYOUT_RANKS = 64


@lru_cache(maxsize=2048)
def layout_parts(params: int, zero_stage: int, precision: str, tp: int, pp: int, nodes: int, ranks_per_node: int,
                 layers: int) -> CheckpointParts:  # fmt: skip
    """The parts of a full-training checkpoint as DeepSpeed 0.19 writes it (infra/checkpoint_layout.py), and what
    each node restores (`restored_per_node`)."""
    return scaled_parts(params, zero_stage, precision, tp, pp, nodes, ranks_per_node, layers, MAX_LAYOUT_RANKS)


@lru_cache(maxsize=512)
def _node_bytes(params: int, zero_stage: int, precision: str, tp: int, pp: int, nodes: int, ranks_per_node: int,
                layers: int) -> tuple[tuple[tuple[int, int, int], ...], int, int]:  # fmt: skip
    """Per node of the layout, (saved, of which optimizer shards, restored); the largest optimizer shard file and
    the largest other file. Cached: every node count past the limit scales the same small layout."""
    layout = CheckpointLayout(params, zero_stage, precision, tp, pp, nodes, ranks_per_node, layers)
    shards, largest_shard, largest_other = [0] * nodes, 0, 0
    for f in layout.files:
        if "optim_states" in f.path:
            shards[f.node] += f.size
            largest_shard = max(largest_shard, f.size)
        else:
            largest_other = max(largest_other, f.size)
    return tuple(zip(layout.saved_bytes, shards, restored_per_node(layout), strict=True)), largest_shard, largest_other


def scaled_parts(params: int, zero_stage: int, precision: str, tp: int, pp: int, nodes: int, ranks_per_node: int,
                 layers: int, max_ranks: int) -> CheckpointParts:  # fmt: skip
    """`layout_parts`, its files enumerated up to `max_ranks` ranks. Beyond (and only for pp stages of whole nodes),
    the layout on n0 nodes (a multiple of pp, at least two nodes a stage) stands for it: a node of the real layout
    is the first node of its stage there or another one, and holds what that node holds but for its optimizer
    shards: every rank writes 12 x params / world of them, so a node's shrink by n0 / nodes."""
    key = (params, zero_stage, precision, tp, pp, ranks_per_node, layers)
    n0 = pp * max(2, max_ranks // ranks_per_node // pp)
    scaled = nodes * ranks_per_node > max_ranks and nodes % pp == 0 and n0 < nodes
    per_node, shard_file, other_file = _node_bytes(params, zero_stage, precision, tp, pp, n0 if scaled else nodes,
                                                   ranks_per_node, layers)  # fmt: skip
    if not scaled:  # (node, how many nodes like it, saved, optimizer shards, restored)
        return _parts(key, nodes, [(n, 1, *per_node[n]) for n in range(nodes)], max(shard_file, other_file))
    per_stage, per_stage0, rows = nodes // pp, n0 // pp, []
    for stage in range(pp):
        for rep, node, count in ((stage * per_stage0, stage * per_stage, 1),
                                 (stage * per_stage0 + 1, stage * per_stage + 1, per_stage - 1)):  # fmt: skip
            saved, shards, restored = per_node[rep]
            own = shards * n0 / nodes
            rows.append((node, count, saved - shards + own, own, restored - shards + own))
    return _parts(key, nodes, rows, max(shard_file * n0 / nodes, other_file))


def _parts(key: tuple, nodes: int, rows: list[tuple], largest_file: float) -> CheckpointParts:
    """CheckpointParts from (node, how many nodes like it, saved, optimizer shards, restored) rows. Every node
    restores the layout's largest file or one as large: the model-states file (ZeRO-0/1/2 without a pipeline), its
    own shards (ZeRO-3: all alike), or under a pipeline its own shards and its stage's layers."""
    _params, zero_stage, precision, _tp, pp, _ranks_per_node, _layers = key
    node, _, saved, shards, _ = max(rows, key=lambda r: (r[2], -r[0]))
    model = saved - shards
    bits = 8 * (4 if precision == "fp32" else 2)
    if zero_stage == 3:
        why = ("ZeRO-3: every rank writes its own shard of the fp32 master weights and Adam states, and no "
               f"{bits}-bit model")  # fmt: skip
        fetch = "its own part"
    elif pp > 1:
        why = (f"the first node of each of the {pp} pipeline stages writes its stage's {bits}-bit layers "
               f"({gb(model)} GB) beside its optimizer shards ({gb(shards)} GB)")  # fmt: skip
        fetch = "its own part and its stage's layers"
    else:
        why = (f"ZeRO-{zero_stage} keeps the {bits}-bit model on data-parallel rank 0 ({gb(model)} GB) beside its "
               f"optimizer shards ({gb(shards)} GB)")  # fmt: skip
        fetch = "its own part and the model-states files every rank loads"
    return CheckpointParts(nodes, float(sum(r[1] * r[2] for r in rows)), float(saved), node,
                           float(max(r[4] for r in rows)), float(sum(r[1] * r[4] for r in rows)), float(model),
                           why, min(r[2] for r in rows) == saved, fetch, key, float(largest_file),
                           _sizes(rows, 2), _sizes(rows, 4))  # fmt: skip


def _sizes(rows: list[tuple], column: int) -> tuple[tuple[float, int], ...]:
    """(bytes, how many nodes) of one column of `_parts`' rows, equal sizes merged."""
    counts: dict[float, int] = {}
    for row in rows:
        counts[float(row[column])] = counts.get(float(row[column]), 0) + row[1]
    return tuple(sorted(counts.items()))


Checkpoint = float | CheckpointParts  # bytes split evenly over the nodes, or the parts themselves


def parts_of(checkpoint: Checkpoint, nodes: int) -> CheckpointParts:
    if isinstance(checkpoint, CheckpointParts):
        if checkpoint.nodes != nodes:
            raise ValueError(f"checkpoint parts of {checkpoint.nodes} nodes priced for {nodes}")
        return checkpoint
    return even_parts(checkpoint, nodes)


@dataclass(frozen=True, slots=True)
class CheckpointTimes:
    """Seconds each part of the node's checkpoint protocol takes (every node in parallel; the slowest decides)."""

    step_boundary_s: float  # worst case: the step that was running when the notice came
    save_s: float  # the largest part to local disk
    upload_s: float  # the largest part to the bucket (on Azure: no sooner than all parts through the account)
    commit_s: float
    download_s: float  # the most any node restores, at the upload rate
    upload_gbps_per_node: float  # the largest part's effective rate
    load_s: float = 0.0  # the most any node restores, read from local disk
    parts: CheckpointParts | None = None
    upload_note: str = ""  # what bounds the upload, for --explain
    download_note: str = ""  # what bounds the download when not the node's own rate, for --explain

    @property
    def emergency_s(self) -> float:
        return self.step_boundary_s + self.save_s + self.upload_s + self.commit_s

    @property
    def durable_lag_s(self) -> float:
        return self.upload_s + self.commit_s


def checkpoint_times(cloud: str, checkpoint: Checkpoint, nodes: int, node_network_gbits: float | None,
                     step_s: float) -> CheckpointTimes:  # fmt: skip
    """`checkpoint`: its parts (`layout_parts`, `even_parts`), or its bytes, split evenly over the nodes."""
    parts = parts_of(checkpoint, nodes)
    node_rate = node_upload_gbps(cloud, nodes, node_network_gbits)
    upload = part_upload_s(cloud, parts.saved_sizes, parts.largest_file_bytes, nodes, node_network_gbits)
    # no per-node download figure is calibrated: a restore moves at the upload rates (Azure: the account's egress)
    download = part_upload_s(cloud, parts.restored_sizes, parts.largest_file_bytes, nodes, node_network_gbits,
                             download=True)  # fmt: skip
    rate = parts.saved_bytes / 1e9 / upload if upload > 0 else upload_gbps_per_node(cloud, nodes, node_network_gbits)
    note = f"{rate:.3g} GB/s per node" + _bound(cloud, upload, parts.saved_bytes, parts.saved_sizes, parts, node_rate,
                                                "parts", AZURE_ACCOUNT_INGRESS_GBPS)  # fmt: skip
    download_note = _bound(cloud, download, parts.restored_bytes, parts.restored_sizes, parts, node_rate,
                           "nodes' restores", AZURE_ACCOUNT_EGRESS_GBPS)  # fmt: skip
    return CheckpointTimes(step_s, parts.saved_bytes / 1e9 / LOCAL_SAVE_GBPS, upload, COMMIT_S, download, rate,
                           parts.restored_bytes / 1e9 / LOCAL_SAVE_GBPS, parts, note, download_note)  # fmt: skip


def _bound(cloud: str, seconds: float, node_bytes: float, sizes: tuple[tuple[float, int], ...],
           parts: CheckpointParts, node_rate: float, what: str, link_gbps: float) -> str:  # fmt: skip
    """What holds a transfer (of `sizes`, the slowest node's `node_bytes`) below the node's own rate, for --explain
    ('' when nothing does)."""
    if seconds <= node_bytes / 1e9 / node_rate * (1 + 1e-9):
        return ""
    per_file = file_gbps(cloud, node_rate)
    if seconds <= parts.largest_file_bytes / 1e9 / per_file * (1 + 1e-9):
        return (f" (its largest file, {gb(parts.largest_file_bytes)} GB, at {per_file:.3g} GB/s: "
                f"{AGENT_STREAMS_PER_FILE} requests of {S3_CONNECTION_GBPS * 1e3:g} MB/s at once)")  # fmt: skip
    total = sum(size * count for size, count in sizes)
    return f" (all {parts.nodes} {what}, {gb(total)} GB, share the storage account's {link_gbps:g} GB/s)"


@dataclass(frozen=True, slots=True)
class ElasticSetting:
    """A stack's checkpoint.elastic for one fleet: shrink to `shrink_nodes` (the largest usable count below the
    fleet's, infra/elastic.py) after `wait_s` without a replacement."""

    min_nodes: int
    wait_s: float
    shrink_nodes: int


def elastic_setting(nodes: int, grad_accum: int, tp: int, pp: int, min_nodes: int,
                    wait_s: float) -> tuple[ElasticSetting | None, str]:  # fmt: skip
    """(the setting, '') when a fleet of `nodes` at `grad_accum` and layout TP x PP can recover elastically with
    `min_nodes`, else (None, why not): the rule the stack schema enforces (infra/config.py)."""
    from infra.elastic import shrink_to

    if (tp, pp) != (1, 1):
        return None, f"it needs pure data parallelism (TP 1 x PP 1), not TP {tp} x PP {pp}"
    if nodes < 2:
        return None, "a one-node plan has nothing to shrink to"
    if min_nodes >= nodes:
        return None, f"min_nodes {min_nodes} is not below the plan's {nodes} nodes"
    n = shrink_to(nodes, grad_accum, min_nodes)
    if n is None:
        return None, (f"{nodes} nodes at grad accum {grad_accum} cannot shrink to {min_nodes}..{nodes - 1} nodes and "
                      "keep the global batch")  # fmt: skip
    return ElasticSetting(min_nodes, wait_s, n), ""


def retry_success(capacity_wait_s: float) -> float:
    """q, the chance each try for capacity succeeds when every try is alike (capacity.try_odds)."""
    return try_odds(capacity_wait_s)[1]


def replacement_survival(t: float, capacity_wait_s: float, first_try: float | None = None) -> float:
    """S(t) = P(T > t): no replacement node up within `t` s, T = PROVISION_S + RETRY_S x (failed tries); the first
    try succeeds with chance q0, each later one q1 (capacity.try_odds)."""
    if t < PROVISION_S:
        return 1.0
    q0, q1 = try_odds(capacity_wait_s, first_try)
    return (1 - q0) * (1 - q1) ** math.floor((t - PROVISION_S) / RETRY_S + 1e-9)


def replacement_expected_min(a: float, capacity_wait_s: float, first_try: float | None = None) -> float:
    """G(a) = E[min(T, a)] = integral of S(t) over [0, a]: S is 1 until PROVISION_S, then (1 - q0)(1 - q1)^j on the
    j-th RETRY_S-long step, so G = min(a, P) + R (1 - q0)(1 - (1 - q1)^j) / q1 + r (1 - q0)(1 - q1)^j with
    x = a - P = jR + r."""
    if a <= PROVISION_S:
        return max(a, 0.0)
    q0, q1 = try_odds(capacity_wait_s, first_try)
    x = a - PROVISION_S
    j = math.floor(x / RETRY_S + 1e-9)
    r = max(0.0, x - j * RETRY_S)
    return PROVISION_S + RETRY_S * (1 - q0) * (1 - (1 - q1) ** j) / q1 + r * (1 - q0) * (1 - q1) ** j


@dataclass(frozen=True, slots=True)
class ElasticRecovery:
    """What elastic recovery costs per lost node, in seconds at full speed (see the module docstring)."""

    setting: ElasticSetting
    nodes: int
    checkpoint_bytes: float
    download_gbps_per_node: float  # at the shrunk size
    shrink_s: float  # c_n: convert to the shrunk size
    grow_s: float  # g: save + upload + commit at n, then convert back to N
    shrink_chance: float  # S(w): no replacement within the wait
    expected_loss_s: float
    without_loss_s: float  # PROVISION_S + capacity wait + download + load

    def explain(self) -> str:
        e, b = self.setting, self.checkpoint_bytes
        return (
            f"elastic recovery (min_nodes {e.min_nodes}, wait {e.wait_s:.0f} s): a lost node's replacement is up "
            f"within the wait with chance {1 - self.shrink_chance:.0%}; else the survivors convert the {b / 1e9:,.0f} "
            f"GB checkpoint to {e.shrink_nodes} nodes in {self.shrink_s:,.0f} s (download it all at "
            f"{self.download_gbps_per_node:g} GB/s + {convert_rate_note()} + "
            f"load), train at {e.shrink_nodes}/{self.nodes} speed until it is up, then save and convert back in "
            f"{self.grow_s:,.0f} s: {self.expected_loss_s:,.0f} s lost per lost node (at full speed, expected) "
            f"against {self.without_loss_s:,.0f} s waiting for the replacement without it"
        )


def conversion_s(cloud: str, checkpoint: Checkpoint, nodes: int, node_network_gbits: float | None,
                 download_bytes_per_s: float | None = None, convert_bytes_per_s: float | None = None) -> float:  # fmt: skip
    """One conversion onto `nodes` nodes: every node downloads every part, converts it (ds_to_universal) and loads
    its own share. `checkpoint`: its bytes or its parts (only their total counts here). The rates default to the
    model's (benchmarks pass the ones they measured)."""
    total = checkpoint.total_bytes if isinstance(checkpoint, CheckpointParts) else checkpoint
    download = download_bytes_per_s or download_gbps_per_node(cloud, nodes, node_network_gbits) * 1e9
    convert = convert_bytes_per_s or UNIVERSAL_CONVERT_BYTES_PER_S
    load = total / nodes / 1e9 / LOCAL_SAVE_GBPS  # a universal checkpoint's share per node, read from local disk
    return total / download + total / convert + load


def elastic_recovery(setting: ElasticSetting, cloud: str, checkpoint: Checkpoint, nodes: int,
                     node_network_gbits: float | None, times: CheckpointTimes,
                     capacity_wait_s: float, first_try: float | None = None) -> ElasticRecovery:  # fmt: skip
    """Expected full-speed seconds lost per lost node with elastic recovery, and without it."""
    n, w = setting.shrink_nodes, setting.wait_s
    parts = parts_of(checkpoint, nodes)
    shrunk = checkpoint_times(cloud, parts.resized(n), n, node_network_gbits, times.step_boundary_s)
    shrink = conversion_s(cloud, parts, n, node_network_gbits)
    # grow back: the shrunk job saves, uploads and commits its parts, then every node converts them for N
    grow = shrunk.save_s + shrunk.durable_lag_s + conversion_s(cloud, parts, nodes, node_network_gbits)
    rejoin = times.download_s + times.load_s  # the replacement joins: each node fetches and loads what it restores
    mean_t = PROVISION_S + capacity_wait_s
    s_w = replacement_survival(w, capacity_wait_s, first_try)
    shrunk_run = max(0.0, mean_t - replacement_expected_min(w + shrink, capacity_wait_s, first_try))  # E[(T-w-c_n)+]
    loss = (replacement_expected_min(w, capacity_wait_s, first_try) + (1 - s_w) * rejoin + s_w * (shrink + grow)
            + (1 - n / nodes) * shrunk_run)  # fmt: skip
    return ElasticRecovery(setting, nodes, parts.total_bytes, download_gbps_per_node(cloud, n, node_network_gbits),
                           shrink, grow, s_w, loss, mean_t + rejoin)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Reliability:
    spot_hazard_per_node_hour: float
    failure_hazard_per_node_hour: float
    nodes: int
    notice_s: float
    checkpoint_write_s: float  # the trainer's blocking local save (periodic checkpoints)
    times: CheckpointTimes
    restart_s: float
    emergency_checkpoint_fits: bool
    interval_s: float  # periodic checkpoint interval tau
    mtbf_loss_hours: float  # M for events that lose work
    useful_hours: float
    eval_hours: float  # evaluation beside the steps (cli/planner/overheads.py)
    data_stall_hours: float  # waiting for batches (cli/planner/overheads.py)
    daly_hours: float  # wall time with periodic checkpoints and lossy events
    wall_hours: float  # plus safe (noticed) interruptions, plus waiting for a full set before the start
    feasible: bool
    start_wait_hours: float = 0.0  # waiting for a full set of spot nodes before the job can start
    capacity_wait_s: float = 0.0  # expected wait for a full set, in every restart too (cli/planner/capacity.py)
    elastic: ElasticRecovery | None = None  # checkpoint.elastic: a lost node's cost with it (is restart_s)
    start_held_share: float = 1.0  # share of the nodes held (and billing) while waiting for the start
    nodes_per_spot_event: float = 1.0  # spot nodes one interruption event takes (capacity.nodes_lost_per_event)

    @property
    def billed_hours(self) -> float:
        """Hours every node bills: the wall time, less what the nodes not yet held do not bill before the start."""
        return self.wall_hours - (1 - self.start_held_share) * self.start_wait_hours

    def billed_usd(self, awaited_usd_per_hour: float, held_usd_per_hour: float = 0.0) -> float:
        """What a fleet's nodes bill over the run: those awaited before the start (spot) `billed_hours`, those held
        throughout (a mixed fleet's on-demand nodes, which run while the spot ones are awaited) the wall time."""
        return awaited_usd_per_hour * self.billed_hours + held_usd_per_hour * self.wall_hours

    @property
    def worked_hours(self) -> float:
        """The steps and what the job runs beside them (evaluation, data-loader stalls), before checkpoints or losses."""
        return self.useful_hours + self.eval_hours + self.data_stall_hours

    @property
    def checkpoint_overhead_hours(self) -> float:
        return self.worked_hours * self.checkpoint_write_s / self.interval_s

    @property
    def interruption_loss_hours(self) -> float:
        return max(0.0, self.wall_hours - self.worked_hours - self.checkpoint_overhead_hours - self.start_wait_hours)

    @property
    def expected_interruptions(self) -> float:
        """Events that cost a restart: spot interruption events (each taking nodes_per_spot_event) and failures."""
        spot = self.spot_hazard_per_node_hour / self.nodes_per_spot_event
        return self.nodes * (spot + self.failure_hazard_per_node_hour) * self.wall_hours

    def explain(self) -> list[str]:
        t = self.times
        return [
            f"hazard per node: spot {self.spot_hazard_per_node_hour:.2e}/h, failure "
            f"{self.failure_hazard_per_node_hour:.2e}/h; job ({self.nodes} nodes) expects "
            f"{self.expected_interruptions:.1f} interruptions"
            + (f" (spot interruptions come together: {self.nodes_per_spot_event:.2f} nodes per event, as in published "
               "AWS preemption traces)" if self.nodes_per_spot_event > 1 else ""),
            *([f"checkpoint parts: {t.parts.explain()}; the largest decides every save, upload and restore below"]
              if t.parts is not None else []),
            f"emergency checkpoint {t.emergency_s:.0f} s = step boundary {t.step_boundary_s:.1f} s + save "
            f"{t.save_s:.1f} s + upload {t.upload_s:.1f} s at "
            f"{t.upload_note or f'{t.upload_gbps_per_node:g} GB/s per node'} + commit {t.commit_s:.0f} s, vs notice "
            f"{self.notice_s:.0f} s: "
            + ("fits, spot interruptions lose no work" if self.emergency_checkpoint_fits else
               f"does not fit, each spot interruption loses the work since the last durable checkpoint (up to "
               f"{(self.interval_s + t.durable_lag_s) / 60:.1f} min)"),
            (f"restart after a lost node {self.restart_s:.0f} s = with elastic recovery "
             f"{self.elastic.expected_loss_s:.0f} s (below) + the upload not yet durable {t.durable_lag_s:.0f} s; "
             f"Young/Daly interval {self.interval_s / 60:.1f} min for M = {self.mtbf_loss_hours:.1f} h between "
             "work-losing events") if self.elastic else
            f"restart after a lost node {self.restart_s:.0f} s = regain a full set of nodes "
            f"{PROVISION_S + self.capacity_wait_s:.0f} s (provision {PROVISION_S:.0f} s + wait for capacity "
            f"{self.capacity_wait_s:.0f} s) + "
            f"download what it restores {t.download_s:.0f} s{t.download_note} + load it {t.load_s:.0f} s + the upload "
            "not yet durable "
            f"{t.durable_lag_s:.0f} s; Young/Daly interval {self.interval_s / 60:.1f} min for "
            f"M = {self.mtbf_loss_hours:.1f} h between work-losing events",
            *([self.elastic.explain()] if self.elastic else []),
            f"wall = {self.useful_hours:.2f} h useful + {self.eval_hours:.2f} h evaluation + "
            f"{self.data_stall_hours:.2f} h data-loader stalls + {self.checkpoint_overhead_hours:.2f} h "
            f"checkpoints + {self.interruption_loss_hours:.2f} h lost/restarting + {self.start_wait_hours:.2f} h "
            f"waiting for the nodes before the start = {self.wall_hours:.2f} h",
        ]  # fmt: skip


def spot_hazard(rate: InterruptionRate | None) -> float:
    """Interruptions per node-hour from a published rate (infra/catalog/interruption.py); an unknown rate is taken
    as the worst AWS bucket, >20%/month."""
    return (WORST_KNOWN if rate is None else rate).hazard_per_node_hour


def daly_interval(write_s: float, mtbf_s: float) -> float:
    """Daly's (2006) higher-order optimum checkpoint interval, seconds of work between checkpoints."""
    if write_s >= 2 * mtbf_s:
        return mtbf_s
    r = write_s / (2 * mtbf_s)
    return math.sqrt(2 * write_s * mtbf_s) * (1 + math.sqrt(r) / 3 + r / 9) - write_s


def daly_wall(useful_s: float, interval_s: float, write_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly's expected wall time for `useful_s` of work with exponential work-losing events (inf where it
    overflows: restarts longer than hundreds of times the time between events never finish)."""
    try:
        return (
            mtbf_s
            * math.exp(restart_s / mtbf_s)
            * math.expm1((interval_s + write_s) / mtbf_s)
            * useful_s
            / interval_s
        )
    except OverflowError:
        return math.inf


def assess(
    useful_hours: float,
    nodes: int,
    devices_per_node: int,
    cloud: str,
    spot: bool,
    interruption: InterruptionRate | None,
    checkpoint_bytes: float,
    node_network_gbits: float | None,
    step_s: float,
    eval_share: float = 0.0,
    data_stall_share: float = 0.0,
    interval_s: float | None = None,
    spot_nodes: int | None = None,
    capacity_wait_s: float = 0.0,
    elastic: ElasticSetting | None = None,
    parts: CheckpointParts | None = None,
    start_held_share: float = 1.0,
    capacity_first_try: float | None = None,
) -> Reliability:
    """`interval_s` fixes the checkpoint interval (a stack's declared one; default Daly's optimum),
    `spot_nodes` how many of the nodes are spot (a mixed fleet; default all of them when `spot`), and
    `capacity_wait_s` the expected wait for a full set of spot nodes (cli/planner/capacity.py): before the
    start, and in every restart, since a lost node's replacement comes from the pool that just shrank;
    `start_held_share` the share of the nodes held (billing) while waiting for the start, `capacity_first_try` the
    chance the first try holds them (None: every try alike, capacity.py). `elastic`:
    a lost node costs what elastic recovery expects instead (`elastic_recovery`). `parts`: how the checkpoint lies
    over the nodes (`layout_parts`); without them, `checkpoint_bytes` split evenly. `eval_share` and
    `data_stall_share`: the job's evaluation and data-loader stalls as shares of the useful time
    (cli/planner/overheads.py JobOverheads.shares)."""
    spot_node = spot_hazard(interruption) if spot else 0.0
    interruptible = nodes if spot_nodes is None else spot_nodes
    per_event = nodes_lost_per_event(interruptible) if spot else 1.0
    spot_events = interruptible * spot_node / per_event  # spot interruption events per hour, for the job
    fail_node = devices_per_node * FAILURES_PER_DEVICE_HOUR
    checkpoint = checkpoint_bytes if parts is None else parts
    times = checkpoint_times(cloud, checkpoint, nodes, node_network_gbits, step_s)
    write = times.save_s
    restart = PROVISION_S + capacity_wait_s + times.download_s + times.load_s  # replace, fetch and load what it needs
    recovery = None
    if elastic is not None:
        recovery = elastic_recovery(elastic, cloud, checkpoint, nodes, node_network_gbits, times, capacity_wait_s,
                                    capacity_first_try)  # fmt: skip
        restart = recovery.expected_loss_s
    lossy_restart = restart + times.durable_lag_s  # a step not yet durable is lost as well
    notice = NOTICE_S.get(cloud, 30.0)
    fits = times.emergency_s <= notice
    loss_rate = (nodes * fail_node + (0.0 if fits else spot_events)) / 3600  # per second
    safe_rate = (spot_events if fits else 0.0) / 3600
    mtbf = 1 / loss_rate
    tau = daly_interval(write, mtbf) if interval_s is None else interval_s
    useful_s = useful_hours * 3600
    daly = daly_wall(useful_s * (1 + eval_share + data_stall_share), tau, write, lossy_restart, mtbf)
    load = safe_rate * (times.emergency_s + restart)
    feasible = load < MAX_SAFE_LOAD and math.isfinite(daly)
    wall = daly / (1 - load) + capacity_wait_s if feasible else math.inf
    if useful_s < MIN_EFFICIENCY * (wall - capacity_wait_s):
        feasible, wall = False, math.inf
    return Reliability(spot_node, fail_node, nodes, notice, write, times, lossy_restart, fits, tau, mtbf / 3600,
                       useful_hours, useful_hours * eval_share, useful_hours * data_stall_share, daly / 3600,
                       wall / 3600, feasible, capacity_wait_s / 3600, capacity_wait_s, recovery, start_held_share,
                       per_event)  # fmt: skip


def storage_usd(cloud: str, checkpoint_bytes: float, wall_hours: float) -> float:
    """Object storage for the kept checkpoints over the run."""
    return KEEP_LAST * checkpoint_bytes / 1e9 * STORAGE_USD_PER_GB_MONTH[cloud] * wall_hours / HOURS_PER_MONTH
