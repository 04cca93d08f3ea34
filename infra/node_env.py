"""The training environment every node runs, in one place: the PyTorch and DeepSpeed versions, and the image
each cloud boots.

What the planner's memory model and the rendered ds_config assume is one DeepSpeed release (its ZeRO
estimators and config schema, tests/test_planner_memory.py and tests/test_userdata_node.py) on one PyTorch;
the e2e test runs exactly this pair on CPU (pyproject's `e2e` extra, .ci/run). Every node gets the same pair:
the boot script (templates/node/trainfleet-boot.sh.j2, `build_env`) builds a virtual environment at
`VENV` from these pins, which reach it through the rendered trainfleet.env, never from "latest", so a node
that replaces a spot loss mid-run ends up with the versions of the peers it rejoins. The system Python is
never touched: Ubuntu 23.04+ marks it externally managed (PEP 668) and refuses `pip install` into it.

How the venv is built, per image:
  * the image carries the pinned torch (its PyTorch python, `NodeImage.pythons`, reports
    `torch.__version__` == TORCH_VERSION, or TORCH_VERSION+<local build tag>): the venv is created from that
    python with --system-site-packages, plus a .pth naming that python's site-packages (a DLAMI's
    /opt/pytorch is itself a venv, whose packages --system-site-packages alone would not show);
  * it does not: a plain venv gets `torch==TORCH_VERSION` from PyPI (Linux x86_64 wheels there are CUDA
    builds), except on Gaudi, whose PyTorch only comes with Intel's software on the image: there the boot
    fails, saying so;
  * either way `deepspeed==DEEPSPEED_VERSION` goes into the venv, the versions are printed, and a node whose
    venv does not report exactly the pins refuses to train (one `trainfleet-boot: FATAL:` line, exit 1).
DeepSpeed's own dependencies (pydantic, numpy, ...) resolve at boot; only torch and DeepSpeed are pinned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.config import Fleet, StackConfig

# ------------------------------------------------------------------------------------------- the pins
# PyTorch: the release the repo's e2e test and CI run (pyproject `e2e`: torch==2.13.0). PyPI has it (`pip index
# versions torch`, 2026-11-24), and PyTorch's Linux x86_64 wheels there are its CUDA builds: a node whose image
# lacks it installs it.
TORCH_VERSION = "2.13.0"
# DeepSpeed: the release the planner's ZeRO memory model and ds_config are tested against (0.19.x; 0.19.8 is
# the one installed and tested here, tests/test_planner_memory.py, tests/test_e2e_deepspeed.py).
DEEPSPEED_VERSION = "0.19.8"
TORCH_MINOR = ".".join(TORCH_VERSION.split(".")[:2])

# Intel Gaudi (dl1): Habana's builds from the Intel Gaudi software release on the image. Support Matrix
# v1.18.0 (https://docs.habana.ai/en/latest/Support_Matrix/Support_Matrix_v1.18.0.html, read 2026-11-24):
# PyTorch 2.4.0, DeepSpeed "forked from 0.14.4 of the official DeepSpeed". Habana's PyTorch is built from
# source and reports 2.4.0a0+git<sha>; its DeepSpeed fork reports 0.14.4+hpu.synapse.v1.18.0.
GAUDI_SOFTWARE_VERSION = "1.18.0"
GAUDI_TORCH_VERSION = "2.4.0a0"
GAUDI_DEEPSPEED_VERSION = "0.14.4"
GAUDI_DEEPSPEED_SPEC = f"git+https://github.com/HabanaAI/DeepSpeed.git@{GAUDI_SOFTWARE_VERSION}"

# ------------------------------------------------------------------------------------------ the images
# Each cloud boots a published image that carries the NVIDIA driver, CUDA, the fabric libraries (EFA and NCCL's
# plugin; InfiniBand and HPC-X on Azure) and no PyTorch the nodes use: the boot installs TORCH_VERSION from PyPI
# into the venv (above). No published image carries torch 2.13, and none needs to. What the image must carry is
# a driver new enough for that wheel: torch 2.13.0's Linux x86_64 wheel on PyPI is a CUDA 13 build (it requires
# nvidia-nccl-cu13 and nvidia-cudnn-cu13, `pip install --dry-run --report`, 2026-11-28), and CUDA 13.0 needs
# an R580 driver or newer. Each name below is one the cloud publishes, checked against the published lists
# vendored in tests/fixtures/published_images/ (where and when each was seen: PROVENANCE.md there;
# tests/test_published_images.py). fleets[].image takes any other image.

# AWS: the DLAMI "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) <date>" by Amazon: NVIDIA's open
# driver (595.91.07 in the 20260915 build, default CUDA 13.2), EFA, the OFI NCCL plugin; Python 3.12
# (/usr/bin/python3.12) and no PyTorch. The fleet takes the newest image the filter finds (x86_64, available,
# owner amazon): the ARM64 line ("Deep Learning ARM64 Base ..."), the Ubuntu 22.04 build and the PyTorch DLAMIs
# ("Deep Learning OSS Nvidia Driver AMI GPU PyTorch <minor> (...)") do not match. AWS also publishes the newest
# one's id per region as the public SSM parameter AWS_GPU_AMI_SSM_PARAMETER (the DLAMI guide, "Find the ID of a
# DLAMI": /aws/service/deeplearning/ami/<architecture>/<name less "deep", "learning", "ami">/latest/ami-id).
# The PyTorch DLAMIs are no better a choice: their newest Ubuntu builds carry PyTorch 2.12 or older, which the
# boot would not use either.
AWS_GPU_AMI_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *"
AWS_GPU_AMI_SSM_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
)
# AWS Gaudi: no published AMI carries Intel Gaudi software GAUDI_SOFTWARE_VERSION. The Habana DLAMI line
# ("Deep Learning AMI Habana PyTorch <v> SynapseAI <v> (Ubuntu <v>)"; the names seen carry SynapseAI 0.15 to
# 1.6, 2021-2022) left the DLAMI release notes, and a public AMI is deprecated at most two years after its
# creation (EnableImageDeprecation, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
# API_EnableImageDeprecation.html). A Gaudi fleet boots the user's own image: the newest one in their account
# named GAUDI_AMI_NAME (infra/aws/gaudi.py says how to build it; `stacks check` names it as a first-deploy step),
# or one pinned by id in fleets[].image. HABANA_AMI_NAME only finds the old public ones, which the boot would
# refuse (their PyTorch is not Habana's 2.4).
HABANA_AMI_NAME = "Deep Learning AMI Habana PyTorch * SynapseAI * (Ubuntu *"
GAUDI_AMI_PREFIX = f"trainfleet-gaudi-{GAUDI_SOFTWARE_VERSION}-"
GAUDI_AMI_NAME = f"{GAUDI_AMI_PREFIX}*"  # e.g. trainfleet-gaudi-1.18.0-20261128, owned by the deploying account

# GCP: the Deep Learning VM base family "Base-cu129 (Python 3.12 / Ubuntu 24.04)" in deeplearning-platform-release:
# driver branch 580, CUDA 12.9, no PyTorch; patches and availability until August 4, 2028 ("Choose an image",
# https://docs.cloud.google.com/deep-learning-vm/docs/images). Families are named <framework>-<cuda>-<os>-nvidia-
# <driver>; in the tables read none carries PyTorch 2.13 (the newest PyTorch family there is
# pytorch-2-9-cu129-ubuntu-2404-nvidia-580) and none is a CUDA 13 one. A family resolves to its newest image at each `pulumi up`
# (`gcloud compute images describe-from-family FAMILY --project deeplearning-platform-release`).
GCP_DL_IMAGE_FAMILY = "common-cu129-ubuntu-2404-nvidia-580"
GCP_DL_IMAGE = f"projects/deeplearning-platform-release/global/images/family/{GCP_DL_IMAGE_FAMILY}"

# Azure: Microsoft's Ubuntu HPC image for Ubuntu 24.04 (NVIDIA driver 580.173.02, CUDA 13.0, InfiniBand with
# DOCA/OFED, HPC-X, NCCL; no PyTorch), which Azure/azhpc-images lists as microsoft-dsvm:ubuntu-hpc:2404:latest
# beside the 22.04 one; Azure Batch names 2404 the successor of the 22.04 HPC images. (publisher, offer, sku,
# version)
AZURE_HPC_IMAGE = ("microsoft-dsvm", "ubuntu-hpc", "2404", "latest")

# Where the venv goes on a node.
VENV = "/opt/trainfleet/venv"
# The agent's own venv (the SDKs of AGENT_REQUIREMENTS), apart from the training one: the agent must run within
# seconds of boot, before PyTorch and DeepSpeed are installed (templates/node/trainfleet-boot.sh.j2, build_agent_env).
AGENT_VENV = "/opt/trainfleet/agent-venv"
# The agent's SDKs, pinned to the versions its tests run (pyproject's `test` extra). A node installs only its own
# cloud's: all three together are a 37 MB download and 208 MB installed (google-cloud-compute alone 69 MB).
AGENT_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "aws": (
        # membership.py (peers, scale-to-zero) and lifecycle.py (CompleteLifecycleAction, RecordLifecycleActionHeartbeat)
        "boto3==1.44.8",
        "botocore==1.44.8",
        # stores.py: s3transfer's TransferManager (multipart, parts in parallel); awscrt is botocore's CRC64NVME
        # (the S3 checksum of every upload, and of every download checked against the manifest)
        "s3transfer==0.19.3",
        "awscrt==0.38.1",
    ),
    "gcp": (
        # membership.py: managed instance groups over REST with the metadata server's token. 1.48.0 is the newest
        # whose protobuf range admits 5.29 (1.49+ need protobuf>=6.33.5, which pulumi-policy refuses in the test
        # environment); the libraries under it are pinned to the tested ones too
        "google-cloud-compute==1.48.0",
        "google-api-core==2.33.0",
        "google-auth==2.63.0",
        "proto-plus==1.28.2",
        "protobuf==5.29.6",
        # stores.py: uploads and downloads with their CRC32C checked (google-crc32c's C implementation)
        "google-cloud-storage==3.17.1",
        "google-cloud-core==2.8.0",
        "google-resumable-media==2.11.0",
        "google-crc32c==1.9.0",
    ),
    "azure": (
        # membership.py: the scale set's network interfaces and capacity, with a managed identity
        "azure-identity==1.27.0",
        "azure-mgmt-compute==39.0.0",
        "azure-mgmt-network==33.1.0",
        "azure-core==1.41.0",
        # stores.py: block blobs with each request's Content-MD5 checked by the service
        "azure-storage-blob==12.31.1",
    ),
}


@dataclass(frozen=True)
class NodeImage:
    """What the boot script needs to know about an image to build the venv the same way on every node."""

    torch_version: str  # what `torch.__version__` must report (exactly, or followed by +<local build tag>)
    torch_spec: str  # pip requirement for it when the image lacks it; "" when pip cannot provide it (Gaudi)
    deepspeed_version: str  # what the installed DeepSpeed must report (same rule)
    deepspeed_spec: str  # pip requirement that installs it
    # Pythons that may carry the image's PyTorch, in order (`python3`: the one on PATH). The venv is built on the
    # first whose torch is torch_version; if none is, the first that exists builds a plain venv.
    pythons: tuple[str, ...]


NVIDIA_PINS = dict(
    torch_version=TORCH_VERSION,
    torch_spec=f"torch=={TORCH_VERSION}",
    deepspeed_version=DEEPSPEED_VERSION,
    deepspeed_spec=f"deepspeed=={DEEPSPEED_VERSION}",
)

IMAGES: dict[str, NodeImage] = {
    # Base DLAMI: no PyTorch, the system python3 (3.12) builds the venv. A PyTorch DLAMI pinned in fleets[].image
    # keeps PyTorch in the venv /opt/pytorch (release notes: python_location /opt/pytorch/bin/python): tried first.
    "aws": NodeImage(**NVIDIA_PINS, pythons=("/opt/pytorch/bin/python3", "python3")),
    # Deep Learning VM: a conda base (/opt/conda) as older DLVM images had, a /opt/pytorch venv, or the system
    # python, in that order; the base family has no PyTorch, so the first that exists builds a plain venv.
    "gcp": NodeImage(
        **NVIDIA_PINS, pythons=("/opt/conda/bin/python3", "/opt/pytorch/bin/python3", "python3")
    ),
    # Ubuntu HPC: no PyTorch; the system python3 only builds the venv (python3 -m venv, never pip into it).
    "azure": NodeImage(**NVIDIA_PINS, pythons=("python3",)),
    # Habana: Intel's installer puts PyTorch into the system python's dist-packages.
    "gaudi": NodeImage(
        torch_version=GAUDI_TORCH_VERSION,
        torch_spec="",
        deepspeed_version=GAUDI_DEEPSPEED_VERSION,
        deepspeed_spec=GAUDI_DEEPSPEED_SPEC,
        pythons=("/usr/bin/python3", "python3"),
    ),
}


def node_image(cloud: str, gaudi: bool = False) -> NodeImage:
    """The environment a fleet's nodes build: Gaudi's (AWS dl1), else the cloud's NVIDIA one."""
    return IMAGES["gaudi" if gaudi else cloud]


# ------------------------------------------------------------------------ the checkpoint's disk and time
# What trainfleet.env tells the boot script about this fleet's checkpoint (issue 29 #3, #6): how long to wait for
# the trainer to save and exit before killing it (`stop_trainer`), and the disk the checkpoint folder must offer
# before a launch (`check_disk`). Both from the checkpoint each node writes (infra/disk_need.py).
def checkpoint_env(config: StackConfig, fleet: Fleet) -> dict[str, int]:
    """{"stop_grace_seconds", "disk_needed_bytes", "commit_wait_seconds"} for the fleet's trainfleet.env."""
    from infra.disk_need import disk_need, stop_grace_s

    need = disk_need(config, fleet)
    return {"stop_grace_seconds": stop_grace_s(need.saved_bytes), "disk_needed_bytes": need.checkpoint_bytes,
            "commit_wait_seconds": commit_wait_s(fleet.cloud, fleet.nodes, need.saved_bytes)}  # fmt: skip


MIN_COMMIT_WAIT_S = 60  # the fixed wait before issue 29


def commit_wait_s(cloud: str, nodes: int, saved_bytes: int) -> int:
    """How long a node's `sync` before a relaunch waits for the step's commit (node 0 for the other parts, every other
    node for node 0's commit): the largest part's upload at the cloud's per-node rate plus the commit, with a quarter
    more, in whole tens of seconds. Node 0's part, the whole 16-bit model under ZeRO-1/2, goes up last; a node that
    stopped waiting restored the previous step (issue 29 #8). The rate is checkpoint_io.py's without the instance's
    network cap (not known here), so it is the upper one: the wait errs short only where the NIC is the limit."""
    from infra.checkpoint_io import COMMIT_S, upload_gbps_per_node

    needed = 1.25 * (saved_bytes / (upload_gbps_per_node(cloud, nodes, None) * 1e9) + COMMIT_S)
    return max(MIN_COMMIT_WAIT_S, math.ceil(needed / 10) * 10)
