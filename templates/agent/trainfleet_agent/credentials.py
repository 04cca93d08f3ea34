"""The node's AWS region, for the SDK clients: env, else the instance's own placement from IMDSv2.

Credentials themselves come from the clouds' SDKs (botocore's default chain, google-auth's compute-engine
credentials, azure-identity's ManagedIdentityCredential), which fetch and refresh them (stores.py)."""

from __future__ import annotations

import os

from .common import log
from .metadata import AwsMetadata, metadata_base


def aws_region(metadata_url: str | None = None) -> str:
    """AWS_REGION / AWS_DEFAULT_REGION / TRAINFLEET_REGION, else IMDS `placement/region` (botocore's own IMDS
    lookup trims the availability zone's last letter, wrong for Local Zones), else us-east-1."""
    r = (
        os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or os.environ.get("TRAINFLEET_REGION")
    )
    if r:
        return r
    try:
        got = AwsMetadata(metadata_base("aws", metadata_url)).get("placement/region")
        if got:
            return got.strip()
    except Exception as e:  # noqa: BLE001
        log("region_lookup_failed", error=str(e)[:200])
    return "us-east-1"
