"""How fast a node saves and uploads its part of a checkpoint, and the notice window that follows from it.

The rates are the planner's (cli/planner/reliability.py reads them here; their sources are in
infra/catalog/data/calibration/checkpoint_io.csv). The program uses them for the one notice window a stack
sets itself: an Azure scale set's terminate notification, which holds a VM that scale-in or deletion is about
to remove long enough for its agent to write a checkpoint.

Parts are not equal: under ZeRO-0/1/2 data-parallel rank 0 alone writes the whole 16-bit model beside its own
optimizer shards (infra/checkpoint_layout.py), so node 0's part is the largest and the slowest node decides when
a step is durable. `part_upload_s` times every node's part moving at once; `checkpoint_part_bytes` gives the
largest from a DeepSpeed layout, and `emergency_checkpoint_s` / `azure_terminate_minutes` take it (without it they
assume an even split).

Two limits besides the node's own rate:
- one file moves no faster than the requests the agent keeps in flight for it. On S3, s3transfer sends
  AGENT_STREAMS_PER_FILE parts of a file at once, each at about 85 MB/s, so the 16-bit model that ZeRO-1/2 keeps in
  one file (140 GB at 70B) moves at 0.68 GB/s however fast the node is. GCS's and Azure's per-node figures were
  measured one object per node, so they are one file's rate already;
- on Azure every node's bytes pass one storage account, 60 Gbit/s in and 200 Gbit/s out, shared fairly among the
  nodes still moving: once the small parts are in, the largest moves at its node's own rate (`shared_link_s`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

LOCAL_SAVE_GBPS = 2.0  # GB/s a node's ranks write their shards to local NVMe (torch.save; checkpoint_io.md)
UPLOAD_GBPS_PER_NODE = {"aws": 1.0, "gcp": 0.35, "azure": 0.35}  # GB/s to the bucket (checkpoint_io.md)
GCP_MANY_NODES, GCP_MANY_NODES_GBPS = 35, 0.19  # Dataflux: 0.35 GB/s per node at 35 nodes, 0.19 at 548
AZURE_ACCOUNT_INGRESS_GBPS = 7.5  # 60 Gbit/s per storage account (Azure scalability targets, large regions)
AZURE_ACCOUNT_EGRESS_GBPS = 25.0  # 200 Gbit/s out of the same account (the same table)
# checkpoint_io.csv, S3 per connection: "make one concurrent request for each 85-90 MB/s" (stated for GETs, taken for
# a multipart upload's parts too), and the agent's requests in flight for one file (TRAINFLEET_UPLOAD_CONCURRENCY's
# default, templates/agent/trainfleet_agent/stores.py; s3transfer's max_request_concurrency for each file).
S3_CONNECTION_GBPS = 0.085
AGENT_STREAMS_PER_FILE = 8
COMMIT_S = 10.0  # PART.json, MANIFEST.json and LATEST round trips, rank 0 verifying every part
# A resumable checkpoint: 16-bit weights plus fp32 master, Adam m and v (cli/planner/workload.py, full training).
CHECKPOINT_BYTES_PER_PARAM = 14.0
# The step that is running when the notice comes finishes before the save starts; not known to the program.
STEP_ALLOWANCE_S = 60.0
# Azure's terminate notification: notBeforeTimeout between 5 and 15 minutes ("Terminate notification for Azure
# Virtual Machine Scale Set instances", learn.microsoft.com/azure/virtual-machine-scale-sets/
# virtual-machine-scale-sets-terminate-notification, read 2026-11-28).
AZURE_TERMINATE_MINUTES = (5, 15)


def node_upload_gbps(cloud: str, nodes: int, node_network_gbits: float | None) -> float:
    """GB/s one node moves to or from the bucket on its own: the cloud's per-node figure, never more than half
    the node's network. Azure's account-wide ingress is not in it (`part_upload_s` applies it to the whole)."""
    rate = UPLOAD_GBPS_PER_NODE.get(cloud, min(UPLOAD_GBPS_PER_NODE.values()))
    if cloud == "gcp" and nodes > GCP_MANY_NODES:
        rate = GCP_MANY_NODES_GBPS
    if node_network_gbits:
        rate = min(rate, node_network_gbits / 8 / 2)
    return rate


def upload_gbps_per_node(cloud: str, nodes: int, node_network_gbits: float | None) -> float:
    """Each node's rate when every node moves an equal part at once: on Azure the account's ingress shared."""
    return _equal_share_gbps(cloud, nodes, node_network_gbits, AZURE_ACCOUNT_INGRESS_GBPS)


def download_gbps_per_node(cloud: str, nodes: int, node_network_gbits: float | None) -> float:
    """Each node's rate when every node downloads as much at once: on Azure the account's egress shared."""
    return _equal_share_gbps(cloud, nodes, node_network_gbits, AZURE_ACCOUNT_EGRESS_GBPS)


def _equal_share_gbps(cloud: str, nodes: int, node_network_gbits: float | None, azure_account_gbps: float) -> float:
    rate = node_upload_gbps(cloud, nodes, node_network_gbits)
    if cloud == "azure":
        rate = min(rate, azure_account_gbps / nodes)
    return rate


def file_gbps(cloud: str, node_rate: float) -> float:
    """GB/s one file moves at on a node whose own rate is `node_rate`: on S3 the agent's parts in flight for it."""
    if cloud == "aws":
        return min(node_rate, AGENT_STREAMS_PER_FILE * S3_CONNECTION_GBPS)
    return node_rate


def shared_link_s(parts: Sequence[tuple[float, int]], node_rate: float, link_rate: float) -> float:
    """Seconds until the last of `parts` ((bytes, how many nodes move that much)) is through a link of `link_rate`
    GB/s that every node moving at once shares fairly, each at no more than `node_rate` (max-min fairness: while k
    nodes move, each gets min(node_rate, link_rate / k), and a node that is done frees its share)."""
    moving = sum(count for _, count in parts)
    sent = seconds = 0.0
    for size, count in sorted(parts):
        seconds += (size / 1e9 - sent) / min(node_rate, link_rate / moving)
        sent, moving = size / 1e9, moving - count
    return seconds


def part_upload_s(cloud: str, parts: Sequence[tuple[float, int]], largest_file_bytes: float, nodes: int,
                  node_network_gbits: float | None, download: bool = False) -> float:  # fmt: skip
    """Seconds until every node's part is in the bucket (or, `download`, every node's restore is on its disk), all
    nodes moving at once. `parts`: (bytes, how many nodes move that much). Each node moves its bytes at its own
    rate, its largest file no faster than `file_gbps`, and on Azure through the account's shared link. With equal
    parts of small files this is part / `upload_gbps_per_node`."""
    node_rate = node_upload_gbps(cloud, nodes, node_network_gbits)
    largest = max(size for size, _ in parts)
    seconds = max(largest / 1e9 / node_rate, largest_file_bytes / 1e9 / file_gbps(cloud, node_rate))
    if cloud == "azure":
        link = AZURE_ACCOUNT_EGRESS_GBPS if download else AZURE_ACCOUNT_INGRESS_GBPS
        seconds = max(seconds, shared_link_s(parts, node_rate, link))
    return seconds


def node_parts(part_bytes: float, total_bytes: float, nodes: int) -> list[tuple[float, int]]:
    """One node's part of `part_bytes` and the rest of `total_bytes` split evenly over the other nodes."""
    if nodes <= 1:
        return [(part_bytes, 1)]
    return [(part_bytes, 1), (max(total_bytes - part_bytes, 0.0) / (nodes - 1), nodes - 1)]


def checkpoint_part_bytes(params: int, zero_stage: int, precision: str, tp: int, pp: int, nodes: int,
                          ranks_per_node: int) -> int:  # fmt: skip
    """The largest part any node writes of a full-training checkpoint, by DeepSpeed 0.19's layout
    (infra/checkpoint_layout.py; fp8 trains with bf16 enabled, infra/userdata.py). What a caller that knows the
    stack's deepspeed section passes to `emergency_checkpoint_s` / `azure_terminate_minutes`."""
    from infra.checkpoint_layout import CheckpointLayout

    # the layer count only sets how many files a pipeline stage's weights are split into, not their bytes
    layout = CheckpointLayout(int(params), zero_stage, "bf16" if precision == "fp8" else precision, tp, pp,
                              max(nodes, 1), ranks_per_node, max(pp, 80))  # fmt: skip
    return max(layout.saved_bytes)


def emergency_checkpoint_s(cloud: str, params: int, nodes: int, node_network_gbits: float | None,
                           part_bytes: float | None = None) -> float:  # fmt: skip
    """Seconds from a notice to a durable checkpoint: the running step, the local save, the upload of the node's
    part and the commit (every node in parallel; the node with the largest part decides). `part_bytes`: that
    largest part (`checkpoint_part_bytes`); without it, each node holds 1/nodes of the checkpoint."""
    total = CHECKPOINT_BYTES_PER_PARAM * params
    part = total / max(nodes, 1) if part_bytes is None else part_bytes
    # no file bound: Azure's (the program's one caller) is its node's rate, and the part is bound by that already
    upload = part_upload_s(cloud, node_parts(part, total, max(nodes, 1)), 0.0, max(nodes, 1), node_network_gbits)
    return STEP_ALLOWANCE_S + part / 1e9 / LOCAL_SAVE_GBPS + upload + COMMIT_S


def azure_terminate_minutes(params: int, nodes: int, node_network_gbits: float | None,
                            part_bytes: float | None = None) -> int:  # fmt: skip
    """The terminate notification's notBeforeTimeout: the whole minutes the emergency checkpoint needs, within
    what Azure allows. A checkpoint that needs more than 15 minutes gets 15, all Azure gives. `part_bytes`: the
    largest part a node writes (`checkpoint_part_bytes`); without it, an even split."""
    needed = emergency_checkpoint_s("azure", params, nodes, node_network_gbits, part_bytes)
    low, high = AZURE_TERMINATE_MINUTES
    return min(max(math.ceil(needed / 60), low), high)
