"""A run's events, read back from its checkpoint bucket: what `trainfleet events` lists.

The nodes write them (`trainfleet_agent.pyz event`, templates/agent/PROTOCOL.md section 7), one JSON object per
event under `<prefix>/events/`, named so that key order is time order. The key and body rules are the agent's
own (templates/agent/trainfleet_agent/events.py), imported here so the writer and the reader never drift.

The bucket and prefix of a stack's fleet are the ones its nodes get in TRAINFLEET_BUCKET / TRAINFLEET_PREFIX
(infra/userdata.py `placeholder_names` and `checkpoint_prefix`); a bucket named by `pulumi up` is not in the
stack file, so it is given with --bucket. Reading is done with the user's own credentials through each cloud's
SDK (boto3's default chain; google-auth's application default credentials; AZURE_STORAGE_KEY or
azure-identity's DefaultAzureCredential), not the node identity the agent's stores use. Endpoint overrides, as
for the agent: AWS_ENDPOINT_URL(_S3), STORAGE_EMULATOR_HOST, TRAINFLEET_AZURE_BLOB_ENDPOINT.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.errors import TrainfleetError, did_you_mean, shown

CLOUDS = ("aws", "gcp", "azure")
FETCH_THREADS = 16


def _agent_events():
    from templates.agent.trainfleet_agent import events

    return events


@dataclass(frozen=True)
class Location:
    cloud: str
    bucket: str
    prefix: str
    fleet: str | None = None
    region: str | None = None

    @property
    def url(self) -> str:
        scheme = {"aws": "s3", "gcp": "gs", "azure": "azure"}[self.cloud]
        return f"{scheme}://{self.bucket}/{_agent_events().events_prefix(self.prefix)}"


@dataclass
class EventList:
    location: Location
    events: list[dict[str, Any]]
    total: int  # event objects under the prefix, shown or not
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (key, why) of objects that are not events


def locate(
    stack: str | None,
    fleet: str | None,
    cloud: str | None,
    bucket: str | None,
    prefix: str | None,
    start: Path | None = None,
) -> Location:
    """Where a run's events are: the stack's fleet (bucket and prefix as its nodes get them), or given."""
    if cloud is not None and cloud not in CLOUDS:
        raise TrainfleetError(
            f"--cloud {shown(cloud)} is not a cloud{did_you_mean(cloud, list(CLOUDS))}; use aws, gcp or azure"
        )
    if stack is None:
        if fleet is not None:
            raise TrainfleetError("--fleet names a fleet of a stack; give --stack NAME too")
        if cloud is None or bucket is None:
            raise TrainfleetError(
                "give --stack NAME (the fleet's bucket and prefix as its nodes get them), or --cloud and --bucket "
                "(and --prefix)"
            )
        return Location(cloud, _check_bucket(cloud, bucket), prefix or "")
    from infra.stack_file import read_stack_file, stack_path
    from infra.userdata import checkpoint_prefix, placeholder_names

    sf = read_stack_file(stack_path(stack, start))
    names = [f.name for f in sf.config.fleets]
    if fleet is None:
        if len(names) != 1:
            raise TrainfleetError(f"stack {sf.env} has fleets {', '.join(names)}; pick one with --fleet NAME")
        chosen = sf.config.fleets[0]
    else:
        match = [f for f in sf.config.fleets if f.name == fleet]
        if not match:
            raise TrainfleetError(
                f"stack {sf.env} has no fleet {shown(fleet)}{did_you_mean(fleet, names)}; its fleets: "
                f"{', '.join(names)}"
            )
        chosen = match[0]
    if cloud is not None and cloud != chosen.cloud:
        raise TrainfleetError(
            f"--cloud {cloud} but fleet {chosen.name} of stack {sf.env} is on {chosen.cloud}; leave --cloud out"
        )
    if bucket is None:
        rendered, _group = placeholder_names(sf.env, sf.config, chosen)
        if rendered.startswith("REPLACE-ME"):  # named by `pulumi up`, not in the stack file
            form = "ACCOUNT/CONTAINER" if chosen.cloud == "azure" else "NAME"
            raise TrainfleetError(
                f"fleet {chosen.name} of stack {sf.env}: its bucket is named by `pulumi up`, not the stack file; "
                f"pass --bucket {form} (the fleet's `bucket` in `pulumi stack output fleets`)"
            )
        bucket = rendered
    return Location(
        chosen.cloud,
        _check_bucket(chosen.cloud, bucket),
        prefix if prefix is not None else checkpoint_prefix(sf.env, sf.config, chosen),
        chosen.name,
        chosen.region,
    )


def _check_bucket(cloud: str, bucket: str) -> str:
    if cloud == "azure":
        account, sep, container = bucket.partition("/")
        if not sep or not account or not container or "/" in container:
            raise TrainfleetError(
                f"--bucket {shown(bucket)}: an Azure bucket is STORAGEACCOUNT/CONTAINER, e.g. mystore/checkpoints"
            )
    elif not bucket or "/" in bucket:
        raise TrainfleetError(
            f"--bucket {shown(bucket)} is not a bucket name; give the name alone, e.g. my-ckpts"
        )
    return bucket


def list_events(location: Location, limit: int | None = None) -> EventList:
    """The newest `limit` events (all with None) in time order; objects that are not events are skipped."""
    events = _agent_events()
    reader = _reader(location)
    base = events.events_prefix(location.prefix)
    keys = sorted(k for k in reader.keys(base) if k.endswith(".json") and "/" not in k[len(base) :])
    out: list[tuple[str, dict[str, Any]]] = []
    skipped: list[tuple[str, str]] = []
    end = len(keys)
    with ThreadPoolExecutor(max_workers=FETCH_THREADS) as pool:
        # newest first, in batches, until `limit` events parse (an object that is not one does not count)
        while end > 0 and (not limit or len(out) < limit):
            start = max(0, end - (max(limit - len(out), FETCH_THREADS) if limit else end))
            batch = keys[start:end]
            for key, data in zip(batch, pool.map(reader.get, batch), strict=True):
                if data is None:  # deleted between the listing and the read
                    continue
                try:
                    out.append((key, events.parse_event(key, data)))
                except ValueError as exc:
                    skipped.append((key, str(exc)))
            end = start
    out.sort(key=lambda pair: pair[0])
    shown_events = [body for _key, body in (out[-limit:] if limit else out)]
    return EventList(location, shown_events, len(keys), sorted(skipped))


# ------------------------------------------------------------------------------------ readers, one per cloud


def _reader(location: Location) -> _S3Reader | _GcsReader | _AzureReader:
    return {"aws": _S3Reader, "gcp": _GcsReader, "azure": _AzureReader}[location.cloud](location)


def _sdk(module: str, package: str, cloud: str):
    import importlib
    import warnings

    # google-api-core warns at import that it will drop this Python one day: not the user's problem today
    warnings.filterwarnings("ignore", message="You are using a Python version", category=FutureWarning)
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrainfleetError(
            f"reading a {cloud} bucket needs the {package} package; pip install {package}"
        ) from None


class _S3Reader:
    def __init__(self, location: Location):
        boto3 = _sdk("boto3", "boto3", "aws")
        from botocore.config import Config

        self.location = location
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or location.region
        config = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=30)
        try:
            self.client = boto3.session.Session().client("s3", region_name=region, config=config)
        except Exception as exc:  # noqa: BLE001 - a broken profile or config file: one line
            raise TrainfleetError(
                f"cannot set up the S3 client: {_first_line(exc)}; check AWS_PROFILE and ~/.aws"
            ) from None

    def _fail(self, exc: Exception, what: str) -> TrainfleetError:
        from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

        loc = self.location
        if isinstance(exc, NoCredentialsError):
            return TrainfleetError(
                "no AWS credentials: set AWS_PROFILE (after `aws sso login`) or AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY"
            )
        if isinstance(exc, EndpointConnectionError):
            return TrainfleetError(
                f"cannot reach S3 ({_first_line(exc)}); check the network or AWS_ENDPOINT_URL"
            )
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code == "NoSuchBucket":
                return TrainfleetError(
                    f"S3 bucket {loc.bucket!r} does not exist; check --bucket (or the stack's bucket)"
                )
            if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
                return TrainfleetError(
                    f"S3 refused {what} s3://{loc.bucket} ({code}); use credentials allowed s3:ListBucket and "
                    "s3:GetObject on it"
                )
        return TrainfleetError(f"S3 {what} s3://{loc.bucket} failed: {_first_line(exc)}")

    def keys(self, prefix: str) -> list[str]:
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix
            )
            return [o["Key"] for page in pages for o in page.get("Contents", [])]
        except Exception as exc:  # noqa: BLE001 - every SDK failure becomes one line
            raise self._fail(exc, "listing") from None

    def get(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.location.bucket, Key=key)["Body"].read()
        except Exception as exc:  # noqa: BLE001
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404"):
                return None
            raise self._fail(exc, "reading") from None


class _GcsReader:
    def __init__(self, location: Location):
        storage = _sdk("google.cloud.storage", "google-cloud-storage", "gcp")
        self.location = location
        if os.environ.get("STORAGE_EMULATOR_HOST"):  # as the agent: an emulator takes anonymous requests
            from google.auth.credentials import AnonymousCredentials

            credentials, project = AnonymousCredentials(), None
        else:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError

            try:
                credentials, project = google.auth.default()
            except DefaultCredentialsError:
                raise TrainfleetError(
                    "no Google credentials: run `gcloud auth application-default login` or set "
                    "GOOGLE_APPLICATION_CREDENTIALS to a key file"
                ) from None
        options = (
            {"api_endpoint": os.environ["TRAINFLEET_GCS_ENDPOINT"]}
            if os.environ.get("TRAINFLEET_GCS_ENDPOINT")
            else None
        )
        self.client = storage.Client(project=project, credentials=credentials, client_options=options)
        self.bucket = self.client.bucket(location.bucket)

    def _fail(self, exc: Exception, what: str) -> TrainfleetError:
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import GoogleAuthError

        name = self.location.bucket
        if isinstance(exc, gexc.NotFound):
            return TrainfleetError(
                f"GCS bucket {name!r} does not exist; check --bucket (or the stack's bucket)"
            )
        if isinstance(exc, (gexc.Forbidden, gexc.Unauthorized, GoogleAuthError)):
            return TrainfleetError(
                f"GCS refused {what} gs://{name} ({type(exc).__name__}); use credentials allowed "
                "storage.objects.list and storage.objects.get on it"
            )
        return TrainfleetError(f"GCS {what} gs://{name} failed: {_first_line(exc)}")

    def keys(self, prefix: str) -> list[str]:
        try:
            return [b.name for b in self.client.list_blobs(self.bucket, prefix=prefix)]
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, "listing") from None

    def get(self, key: str) -> bytes | None:
        from google.api_core.exceptions import NotFound

        try:
            return self.bucket.blob(key).download_as_bytes()
        except NotFound:
            return None
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, "reading") from None


class _AzureReader:
    def __init__(self, location: Location):
        blob = _sdk("azure.storage.blob", "azure-storage-blob", "azure")
        self.location = location
        account, container = location.bucket.split("/", 1)
        key = os.environ.get("AZURE_STORAGE_KEY")
        if key:
            credential: Any = {"account_name": account, "account_key": key}
        else:
            identity = _sdk("azure.identity", "azure-identity (or set AZURE_STORAGE_KEY)", "azure")
            credential = identity.DefaultAzureCredential()
        endpoint = (
            os.environ.get("TRAINFLEET_AZURE_BLOB_ENDPOINT") or f"https://{account}.blob.core.windows.net"
        )
        from templates.agent.trainfleet_agent.stores import (
            AZURE_BLOB_API_VERSION,
        )  # the service version nodes use

        self.container = blob.ContainerClient(
            endpoint.rstrip("/"),
            container,
            credential=credential,
            api_version=AZURE_BLOB_API_VERSION,
            retry_total=3,
            connection_timeout=10,
        )

    def _fail(self, exc: Exception, what: str) -> TrainfleetError:
        from azure.core import exceptions as aexc

        name = self.location.bucket
        if isinstance(exc, aexc.ResourceNotFoundError):
            return TrainfleetError(
                f"Azure container {name!r} does not exist; check --bucket ACCOUNT/CONTAINER"
            )
        if (
            isinstance(exc, aexc.ClientAuthenticationError)
            or type(exc).__name__ == "CredentialUnavailableError"
        ):
            return TrainfleetError(
                f"Azure refused {what} {name} ({type(exc).__name__}); run `az login` with a role allowed to read its "
                "blobs (Storage Blob Data Reader), or set AZURE_STORAGE_KEY"
            )
        if isinstance(exc, aexc.ServiceRequestError):
            return TrainfleetError(
                f"cannot reach the storage account of {name} ({_first_line(exc)}); check the account name or "
                "TRAINFLEET_AZURE_BLOB_ENDPOINT"
            )
        return TrainfleetError(f"Azure {what} {name} failed: {_first_line(exc)}")

    def keys(self, prefix: str) -> list[str]:
        try:
            return [b.name for b in self.container.list_blobs(name_starts_with=prefix)]
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, "listing") from None

    def get(self, key: str) -> bytes | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self.container.download_blob(key).readall()
        except ResourceNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc, "reading") from None


def _first_line(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def details(event: dict[str, Any]) -> str:
    """An event's own fields as `key=value ...` (what the table's details column shows)."""
    import json

    skip = set(_agent_events().RESERVED)
    return " ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in event.items() if k not in skip
    )
