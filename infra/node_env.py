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

from dataclasses import dataclass

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
# AWS: the DLAMI with PyTorch TORCH_MINOR, NVIDIA's open-source driver, CUDA, EFA and NCCL, on Ubuntu. Name
# format from the DLAMI release notes (https://docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-
# notes.html, read 2026-11-24), e.g. "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.12 (Ubuntu 24.04)
# 20260822"; PyTorch in the venv /opt/pytorch (python_location /opt/pytorch/bin/python). The ARM64 line
# ("Deep Learning ARM64 AMI OSS ...") and the Amazon Linux builds are not matched. The notes read here list
# 2.13 for Amazon Linux 2023 (20261003) and Ubuntu 24.04 builds of 2.9, 2.11 and 2.12: the Ubuntu build of
# 2.13 is assumed to follow. Without one, the lookup fails at `pulumi up`, naming this filter.
AWS_GPU_AMI_NAME = f"Deep Learning OSS Nvidia Driver AMI GPU PyTorch {TORCH_MINOR} (Ubuntu *"
# AWS Gaudi: the Habana DLAMI line ("Deep Learning AMI Habana PyTorch <v> SynapseAI <v> (Ubuntu <v>)") is old
# (no release of it in the DLAMI release notes read 2026-11-24), and a public AMI is deprecated at most two
# years after its creation (EnableImageDeprecation, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
# API_EnableImageDeprecation.html): a name filter finds nothing, or only deprecated images. Gaudi fleets pin
# an AMI id instead (fleets[].image, stacks/Pulumi.gaudi.yaml); this name is only for finding one.
HABANA_AMI_NAME = "Deep Learning AMI Habana PyTorch * SynapseAI * (Ubuntu *"

# GCP: a Deep Learning VM image family with PyTorch TORCH_MINOR. Families are named
# pytorch-<major>-<minor>-cu<cuda>-ubuntu-<release>-nvidia-<driver> (pytorch-2-7-cu128-ubuntu-2204-nvidia-570);
# no doc in this repo lists the current ones, so this one is an ASSUMPTION: CUDA 13.0 (a build PyTorch
# publishes for 2.13), driver branch 580 (the first for CUDA 13.0), Ubuntu 22.04. Check it with
# `gcloud compute images describe-from-family FAMILY --project deeplearning-platform-release`. A wrong name
# fails at `pulumi up`; fleets[].image takes any other image, and the boot installs the pinned torch if needed.
GCP_DL_IMAGE_FAMILY = f"pytorch-{TORCH_MINOR.replace('.', '-')}-cu130-ubuntu-2204-nvidia-580"
GCP_DL_IMAGE = f"projects/deeplearning-platform-release/global/images/family/{GCP_DL_IMAGE_FAMILY}"

# Azure: Microsoft's Ubuntu HPC image (NVIDIA driver, CUDA, InfiniBand/OFED, NCCL), which has no PyTorch: the
# boot installs the pinned torch from PyPI into the venv. (publisher, offer, sku, version)
AZURE_HPC_IMAGE = ("microsoft-dsvm", "ubuntu-hpc", "2204", "latest")

# Where the venv goes on a node.
VENV = "/opt/trainfleet/venv"
# The agent's own venv (the SDKs of AGENT_REQUIREMENTS), apart from the training one: the agent must run within
# seconds of boot, before PyTorch and DeepSpeed are installed (templates/node/trainfleet-boot.sh.j2, build_agent_env).
AGENT_VENV = "/opt/trainfleet/agent-venv"
# The agent's SDKs, pinned to the versions its tests run (pyproject's `test` extra). A node installs only its own
# cloud's: all three together are a 37 MB download and 208 MB installed (google-cloud-compute alone 69 MB).
AGENT_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "aws": (
        # membership.py (peers, scale-to-zero) and watch.py (CompleteLifecycleAction)
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
    # DLAMI: PyTorch in the venv /opt/pytorch (release notes: python_location /opt/pytorch/bin/python).
    "aws": NodeImage(**NVIDIA_PINS, pythons=("/opt/pytorch/bin/python3", "python3")),
    # Deep Learning VM: assumed to keep PyTorch in its conda base (/opt/conda), as the DLVM images have; a
    # /opt/pytorch venv or the system python are tried next.
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
