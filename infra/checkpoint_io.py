"""How fast a node saves and uploads its part of a checkpoint, and the notice window that follows from it.

The rates are the planner's (cli/planner/reliability.py reads them here; their sources are in
infra/catalog/data/calibration/checkpoint_io.csv). The program uses them for the one notice window a stack
sets itself: an Azure scale set's terminate notification, which holds a VM that scale-in or deletion is about
to remove long enough for its agent to write a checkpoint.
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


def upload_gbps_per_node(cloud: str, nodes: int, node_network_gbits: float | None) -> float:
    rate = UPLOAD_GBPS_PER_NODE.get(cloud, min(UPLOAD_GBPS_PER_NODE.values()))
    if cloud == "gcp" and nodes > GCP_MANY_NODES:
        rate = GCP_MANY_NODES_GBPS
    if cloud == "azure":
        rate = min(rate, AZURE_ACCOUNT_INGRESS_GBPS / nodes)
    if node_network_gbits:
        rate = min(rate, node_network_gbits / 8 / 2)
    return rate


def emergency_checkpoint_s(cloud: str, params: int, nodes: int, node_network_gbits: float | None) -> float:
    """Seconds from a notice to a durable checkpoint: the running step, the local save, the upload of the node's
    part and the commit (every node in parallel, each with 1/nodes of the checkpoint)."""
    per_node_gb = CHECKPOINT_BYTES_PER_PARAM * params / max(nodes, 1) / 1e9
    upload = per_node_gb / upload_gbps_per_node(cloud, nodes, node_network_gbits)
    return STEP_ALLOWANCE_S + per_node_gb / LOCAL_SAVE_GBPS + upload + COMMIT_S


def azure_terminate_minutes(params: int, nodes: int, node_network_gbits: float | None) -> int:
    """The terminate notification's notBeforeTimeout: the whole minutes the emergency checkpoint needs, within
    what Azure allows. A checkpoint that needs more than 15 minutes gets 15, all Azure gives."""
    needed = emergency_checkpoint_s("azure", params, nodes, node_network_gbits)
    low, high = AZURE_TERMINATE_MINUTES
    return min(max(math.ceil(needed / 60), low), high)
