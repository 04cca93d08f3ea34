"""Azure Resource Manager: its endpoint and a bearer token for it, as every trainfleet call to ARM gets them.

The token: AZURE_ACCESS_TOKEN (`az account get-access-token --query accessToken -o tsv`), else the Azure CLI's own
`az account get-access-token`, else azure-identity's DefaultAzureCredential where the `live` extra installed it.
The endpoint: TRAINFLEET_AZURE_MANAGEMENT_URL (a stand-in's), else https://management.azure.com.
"""

from __future__ import annotations

import logging
import os

from infra.cli_token import token_from

MANAGEMENT_URL = "https://management.azure.com"


def no_token(purpose: str) -> str:
    """The one line for a missing token, naming what it was wanted for."""
    return (f"no Azure access token for {purpose}: set AZURE_ACCESS_TOKEN (e.g. to `az account get-access-token "
            "--query accessToken -o tsv`) or install the Azure CLI and run `az login`")


def management_url() -> str:
    return os.environ.get("TRAINFLEET_AZURE_MANAGEMENT_URL", MANAGEMENT_URL).rstrip("/")


def access_token() -> str | None:
    """A bearer token for ARM, or None when no source has one (the caller says `no_token(...)` in its own error)."""
    token = token_from("AZURE_ACCESS_TOKEN", ["az", "account", "get-access-token", "--resource", MANAGEMENT_URL,
                                              "--query", "accessToken", "-o", "tsv"], timeout=60)  # fmt: skip
    if token:
        return token
    try:
        from azure.core.exceptions import ClientAuthenticationError
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None
    # its failure is a multi-line warning on stderr; the caller's one line says what to do instead
    logging.getLogger("azure.identity").setLevel(logging.ERROR)
    try:
        return DefaultAzureCredential().get_token(MANAGEMENT_URL + "/.default").token
    except ClientAuthenticationError:
        return None
