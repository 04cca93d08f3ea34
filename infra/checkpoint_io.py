"""How fast a node saves and uploads its part of a checkpoint, and the notice window that follows from it.

The rates are the planner's (cli/planner/reliability.py reads them here; their sources are in
infra/catalog/data/calibration/checkpoint_io.csv). The program uses them for the one notice window a stack
sets itself: an Azure scale set's terminate notification, which holds a VM that scale-in or deletion is about
to remove long enough for its agent to write a checkpoint.

Parts are not equal: under ZeRO-0/1/2 data-parallel rank 0 alone writes the whole 16-bit model beside its own
optimizer shards (infra/checkpoint_layout.py), so node 0's part is the largest and the slowest node decides when
a step is durable. `part_upload_s` times that largest part; `checkpoint_part_bytes` gives it from a DeepSpeed
layout, and `emergency_checkpoint_s` / `azure_terminate_minutes` take it (without it they assume an even split).
"""

from __future__ import annotations

import math

LOCAL_SAVE_GBPS = 2.0  # GB/s a node's ranks write their shards to local NVMe (torch.save; checkpoint_io.md)
UPLOAD_GBPS_PER_NODE = {"aws": 1.0, "gcp": 0.35, "azure": 0.35}  # GB/s to the bucket (checkpoint_io.md)
GCP_MANY_NODES, GCP_MANY_NODES_GBPS = 35, 0.19  # Dataflux: 0.35 GB/s per node at 35 nodes, 0.19 at 548
AZURE_ACCOUNT_INGRESS_GBPS = 7.5  # 60 Gbit/s per storage account (Azure scalability targets, large regions)
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
    rate = node_upload_gbps(cloud, nodes, node_network_gbits)
    if cloud == "azure":
        rate = min(rate, AZURE_ACCOUNT_INGRESS_GBPS / nodes)
    return rate


def part_upload_s(cloud: str, part_bytes: float, total_bytes: float, nodes: int,
                  node_network_gbits: float | None) -> float:  # fmt: skip
    """Seconds until the largest part (`part_bytes`) is in the bucket, every node uploading its own at once: at the
    node's own rate, and on Azure no sooner than all `total_bytes` pass the storage account's shared ingress.
    With equal parts (part = total / nodes) this is part / `upload_gbps_per_node`."""
    seconds = part_bytes / 1e9 / node_upload_gbps(cloud, nodes, node_network_gbits)
    if cloud == "azure":
        seconds = max(seconds, total_bytes / 1e9 / AZURE_ACCOUNT_INGRESS_GBPS)
    return seconds


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
    upload = part_upload_s(cloud, part, total, max(nodes, 1), node_network_gbits)
    return STEP_ALLOWANCE_S + part / 1e9 / LOCAL_SAVE_GBPS + upload + COMMIT_S


def azure_terminate_minutes(params: int, nodes: int, node_network_gbits: float | None,
                            part_bytes: float | None = None) -> int:  # fmt: skip
    """The terminate notification's notBeforeTimeout: the whole minutes the emergency checkpoint needs, within
    what Azure allows. A checkpoint that needs more than 15 minutes gets 15, all Azure gives. `part_bytes`: the
    largest part a node writes (`checkpoint_part_bytes`); without it, an even split."""
    needed = emergency_checkpoint_s("azure", params, nodes, node_network_gbits, part_bytes)
    low, high = AZURE_TERMINATE_MINUTES
    return min(max(math.ceil(needed / 60), low), high)
