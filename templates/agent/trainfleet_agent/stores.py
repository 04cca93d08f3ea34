"""Object stores: S3, GCS and Azure Blob behind one small interface, each over its cloud's own SDK.

The SDKs speak the protocols: signing, credentials from the instance's identity (refreshed before they
expire), files in parts uploaded in parallel, retries with backoff, and the integrity checks below. Each SDK
is imported when its store is made, so a node loads only its own cloud's (infra/node_env.py AGENT_REQUIREMENTS
pins them).

Integrity: every upload carries a checksum that the SDK computes while it sends the bytes and the service
checks; `put_file` returns the object's checksum as a token "<algorithm>:<value>", in the form the service
reports it, for the manifest. `download` computes the token's algorithm over the bytes as it writes them and
compares (no second pass over the file).

- aws "crc64nvme:<base64 of 8 bytes>": S3 additional checksums. botocore sends `x-amz-checksum-crc64nvme` with
  each PutObject and UploadPart and S3 rejects a body that does not match (400 BadDigest). A multipart upload
  is created with ChecksumType FULL_OBJECT, so S3 combines the checked parts' CRCs into the whole object's
  CRC64NVME, the same value a single PutObject gets and a download computes; HeadObject (ChecksumMode ENABLED)
  reads it back once the upload is complete.
- gcp "crc32c:<base64 of 4 bytes>": google-cloud-storage with checksum="crc32c". A small upload (<= 8 MiB)
  sends the CRC32C in its metadata and GCS rejects a mismatch; a resumable upload compares its running CRC32C
  with the one GCS computed over what it stored, and deletes the object and raises DataCorruption when they
  differ. The token is the object's crc32c as GCS reports it.
- azure "md5:<base64 of 16 bytes>": azure-storage-blob with validate_content="md5" sends each request's
  Content-MD5, which the service checks (400 Md5Mismatch). Azure keeps no whole-blob checksum for a blob
  built from blocks (Put Block List stores none), so the token is the MD5 of the bytes the SDK read, taken as
  it reads them (front to back, once); for a blob sent in one Put Blob it must equal the MD5 the service
  computed and returned.
- "sha256:<hex>": manifests from before these SDK stores; verified on download.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import urllib.parse

from .common import DEFAULT_METADATA, log, route_sdk_logs
from .credentials import aws_region
from .metadata import metadata_base

# ------------------------------------------------------------------------------------------ checksums


class Checksum:
    """A running checksum of one algorithm; `token()` is "<algorithm>:<value>" as its service writes it."""

    ALGORITHMS = ("crc64nvme", "crc32c", "md5", "sha256")

    def __init__(self, algorithm: str):
        if algorithm not in self.ALGORITHMS:
            raise ValueError(f"unsupported checksum {algorithm!r}")
        self.algorithm = algorithm
        self._crc = 0
        self._hash = None
        if algorithm in ("md5", "sha256"):
            self._hash = hashlib.new(algorithm)
        elif algorithm == "crc64nvme":
            from awscrt import checksums  # botocore's own CRC64NVME (botocore[crt])

            self._crc_fn = checksums.crc64nvme
        else:
            try:
                import google_crc32c  # google-cloud-storage's own CRC32C

                self._crc_fn = google_crc32c.extend
            except ImportError:
                from awscrt import checksums

                self._crc_fn = lambda crc, data: checksums.crc32c(data, crc)

    def update(self, data: bytes) -> None:
        if self._hash is not None:
            self._hash.update(data)
        elif self.algorithm == "crc64nvme":
            self._crc = self._crc_fn(data, self._crc)
        else:
            self._crc = self._crc_fn(self._crc, data)

    def token(self) -> str:
        if self.algorithm == "sha256":
            return "sha256:" + self._hash.hexdigest()
        if self.algorithm == "md5":
            digest = self._hash.digest()
        else:
            digest = self._crc.to_bytes(8 if self.algorithm == "crc64nvme" else 4, "big")
        return f"{self.algorithm}:{base64.b64encode(digest).decode()}"


class _HashingWriter:
    """The file a download is written to, as the SDKs see it: every chunk goes through the checksum, in
    order. Not seekable, so the SDKs write front to back (s3transfer reorders its parallel ranges itself)."""

    def __init__(self, f, checksum: Checksum):
        self._f = f
        self._checksum = checksum

    def write(self, data) -> int:
        self._checksum.update(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def seekable(self) -> bool:
        return False


class _HashingReader:
    """A file the Azure SDK reads front to back, once (it does when it validates content: it reads each block
    into memory to hash it); hashes what it hands over. No seek or tell, so the SDK cannot read twice."""

    def __init__(self, f, checksum: Checksum):
        self._f = f
        self._checksum = checksum
        self.bytes_read = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._checksum.update(data)
        self.bytes_read += len(data)
        return data


# ------------------------------------------------------------------------------------------ the interface


_STAND_IN_LOCK = threading.Lock()


class ObjectStore:
    """The one interface the checkpoint code uses; keys are full object names in the bucket.

    `put_file` returns the checksum token of what the service stored and checked; `download` verifies the bytes
    it wrote against a token. Part size and concurrency come from the environment (TRAINFLEET_PART_SIZE,
    TRAINFLEET_UPLOAD_CONCURRENCY): files larger than a part go up in parts, `concurrency` at a time.
    """

    part_size = int(os.environ.get("TRAINFLEET_PART_SIZE", str(64 << 20)))
    concurrency = int(os.environ.get("TRAINFLEET_UPLOAD_CONCURRENCY", "8"))

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def put_file(self, key: str, path: str) -> str:
        """Upload a file, streamed (large ones in parts, in parallel); return its checksum token."""
        raise NotImplementedError

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no such object."""
        raise NotImplementedError

    def download(self, key: str, path: str, checksum: str) -> bool:
        """Stream an object to `path`; True if what was written matches the checksum token (False also when
        the object is gone)."""
        running = Checksum(checksum.partition(":")[0])
        with open(path, "wb") as f:
            if not self._download_to(key, _HashingWriter(f, running)):
                return False
        return running.token() == checksum

    def _download_to(self, key: str, sink) -> bool:
        """Write the object to `sink` front to back; False when there is no such object."""
        raise NotImplementedError

    def list(self, prefix: str) -> dict[str, int]:
        """{key: size} of every object whose key starts with `prefix`."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        """Delete an object; deleting a missing one is not an error."""
        raise NotImplementedError

    def stored_checksum(self, key: str) -> str | None:
        """The checksum token the service itself keeps for the object, or None where it keeps none (an Azure blob
        built from blocks; an in-process stand-in). The committer compares it with what a node's PART.json claims."""
        return None

    def get_versioned(self, key: str) -> tuple[bytes | None, str | None]:
        """The object's bytes and the version a conditional write names (ETag, GCS generation); (None, None) when
        there is no such object. The default, for in-process stand-ins: the bytes are the version."""
        data = self.get_bytes(key)
        return data, None if data is None else data.hex()

    def put_if(self, key: str, data: bytes, version: str | None) -> bool:
        """Write the object only if it is still at `version` (None: only if there is none); False when another
        writer got there first. The clouds check it in the service (S3 If-Match / If-None-Match, GCS
        ifGenerationMatch, Azure If-Match / If-None-Match); the default, for in-process stand-ins, compares and
        writes under one lock."""
        with _STAND_IN_LOCK:
            if self.get_versioned(key)[1] != version:
                return False
            self.put_bytes(key, data)
            return True


# ------------------------------------------------------------------------------------------ S3


def _max_attempts() -> int:
    """Attempts per S3 call (AWS_MAX_ATTEMPTS, the SDKs' own variable, which a Config in code overrides)."""
    return max(1, int(os.environ.get("AWS_MAX_ATTEMPTS") or "6"))


class S3Store(ObjectStore):
    """botocore's S3 client (the one boto3.client("s3") makes) and s3transfer's TransferManager; credentials from
    botocore's default chain (env keys, else the IMDSv2 instance role, refreshed before it expires)."""

    ALGORITHM = "CRC64NVME"

    def __init__(self, bucket: str, metadata_url: str | None = None):
        import botocore.session
        from botocore.config import Config

        self.bucket = bucket
        session = botocore.session.get_session()
        imds = metadata_base("aws", metadata_url)
        if imds != DEFAULT_METADATA["aws"]:  # --metadata-url / TRAINFLEET_METADATA_URL: where the role is
            session.set_config_variable("ec2_metadata_service_endpoint", imds)
        if not os.environ.get("AWS_METADATA_SERVICE_NUM_ATTEMPTS"):  # botocore tries IMDS once by default;
            session.set_config_variable("metadata_service_num_attempts", 3)  # a restore at boot must not give up
        creds = session.get_credentials()
        if creds is None:
            raise RuntimeError("no AWS credentials: no env keys and no instance role")
        log("aws_credentials", source=creds.method)
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
        config = Config(
            retries={"mode": "adaptive", "total_max_attempts": _max_attempts()},
            connect_timeout=10,
            read_timeout=60,
            # files in parallel, each with its parts in parallel
            max_pool_connections=max(10, self.concurrency * self.concurrency),
            s3={"addressing_style": "path" if endpoint else "auto"},
            request_checksum_calculation="when_supported",
            response_checksum_validation="when_supported",
        )
        # Region from env or IMDS placement/region (botocore's IMDS lookup trims an availability zone's name,
        # wrong for Local Zones).
        self.client = session.create_client(
            "s3", region_name=aws_region(metadata_url), endpoint_url=endpoint, config=config
        )
        self._errors = self.client.exceptions

    def _transfer(self):
        # s3transfer's own (classic) manager, never the CRT one boto3 picks on some instance types (p4d, p5):
        # the same code path everywhere. One per call, so the part size is the store's at that moment.
        from s3transfer.manager import TransferConfig, TransferManager

        config = TransferConfig(
            multipart_threshold=self.part_size + 1,  # larger than a part: multipart
            multipart_chunksize=self.part_size,
            max_request_concurrency=self.concurrency,
        )
        return TransferManager(self.client, config)

    def _missing(self, e) -> bool:
        """A missing key: 404, or 403 where the role may list only its prefix (S3 answers 403 instead of 404
        to a principal without s3:ListBucket on the bucket: GetObject API reference, "Permissions")."""
        code = str(e.response.get("Error", {}).get("Code", ""))
        return code in ("NoSuchKey", "404", "NotFound", "403", "AccessDenied")

    def put_bytes(self, key, data):
        self.client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data), ChecksumAlgorithm=self.ALGORITHM)

    def put_file(self, key, path):
        size = os.path.getsize(path)
        extra = {"ChecksumAlgorithm": self.ALGORITHM, "ChecksumType": "FULL_OBJECT"}
        with self._transfer() as transfer:
            future = transfer.upload(path, self.bucket, key, extra_args=extra)
            future.result()  # the SDK's verdict: a failed part or completion (even a 200 with <Error>) raises
        head = self.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        value = head.get("ChecksumCRC64NVME")
        if not value or head.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT" or head["ContentLength"] != size:
            raise RuntimeError(
                f"s3://{self.bucket}/{key}: stored {head['ContentLength']} bytes (of {size}) with checksum "
                f"{head.get('ChecksumType')} {value!r}, not a whole-object CRC64NVME"
            )
        return "crc64nvme:" + value

    def get_bytes(self, key):
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self._errors.ClientError as e:
            if self._missing(e):
                return None
            raise

    def _download_to(self, key, sink):
        try:
            with self._transfer() as transfer:
                transfer.download(self.bucket, key, sink).result()
        except self._errors.ClientError as e:
            if self._missing(e):
                return False
            raise
        return True

    def list(self, prefix):
        out: dict[str, int] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = int(obj["Size"])
        return out

    def delete(self, key):
        self.client.delete_object(Bucket=self.bucket, Key=key)

    def stored_checksum(self, key):
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except self._errors.ClientError as e:
            if self._missing(e):
                return None
            raise
        value = head.get("ChecksumCRC64NVME")
        return "crc64nvme:" + value if value and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT" else None

    def get_versioned(self, key):
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
        except self._errors.ClientError as e:
            if self._missing(e):
                return None, None
            raise
        return answer["Body"].read(), answer["ETag"]

    def put_if(self, key, data, version):
        # S3 conditional writes (PutObject If-Match / If-None-Match: "*"): 412 PreconditionFailed, or 409
        # ConditionalRequestConflict when another conditional write on the key is in flight.
        condition = {"IfMatch": version} if version is not None else {"IfNoneMatch": "*"}
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data), ChecksumAlgorithm=self.ALGORITHM,
                                   **condition)  # fmt: skip
        except self._errors.ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True


# ------------------------------------------------------------------------------------------ GCS

GCS_CHUNK_ALIGN = 256 << 10  # a resumable upload's chunks are multiples of 256 KiB (JSON API, resumable uploads)


class GcsStore(ObjectStore):
    """google-cloud-storage, credentials from the metadata server (google-auth's compute_engine credentials),
    or anonymous against an emulator (STORAGE_EMULATOR_HOST, as the client library itself does)."""

    def __init__(self, bucket: str, metadata_url: str | None = None):
        md = metadata_base("gcp", metadata_url)
        if md != DEFAULT_METADATA["gcp"]:
            # google-auth finds the metadata server by GCE_METADATA_HOST (host[:port]), read when it is imported
            os.environ["GCE_METADATA_HOST"] = urllib.parse.urlsplit(md).netloc or md
        from google.cloud import storage

        options = None
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        else:
            from google.auth import compute_engine

            credentials = compute_engine.Credentials()
            if os.environ.get("TRAINFLEET_GCS_ENDPOINT"):
                options = {"api_endpoint": os.environ["TRAINFLEET_GCS_ENDPOINT"]}
        self.client = storage.Client(project=None, credentials=credentials, client_options=options)
        self.bucket = self.client.bucket(bucket)
        from google.api_core.exceptions import NotFound

        self._not_found = NotFound

    def _blob(self, key):
        chunk = max(GCS_CHUNK_ALIGN, self.part_size // GCS_CHUNK_ALIGN * GCS_CHUNK_ALIGN)
        return self.bucket.blob(key, chunk_size=chunk)

    def put_bytes(self, key, data):
        self._blob(key).upload_from_string(bytes(data), content_type="application/octet-stream", checksum="crc32c")

    def stored_checksum(self, key):
        blob = self.bucket.get_blob(key)
        return "crc32c:" + blob.crc32c if blob is not None and blob.crc32c else None

    def get_versioned(self, key):
        from google.api_core.exceptions import PreconditionFailed

        for _ in range(5):
            blob = self.bucket.get_blob(key)  # its metadata: the live generation
            if blob is None:
                return None, None
            generation = blob.generation  # before the download, which sets it again from its answer's headers
            try:  # the bytes of that very generation: a write in between fails this, and the read goes again
                data = blob.download_as_bytes(checksum="crc32c", if_generation_match=generation)
            except (PreconditionFailed, self._not_found):
                continue
            return data, str(generation)
        raise RuntimeError(f"gs://{self.bucket.name}/{key} kept changing while read")

    def put_if(self, key, data, version):
        from google.api_core.exceptions import PreconditionFailed

        try:  # ifGenerationMatch: the generation read, or 0 for "no live object" (GCS request preconditions)
            self._blob(key).upload_from_string(bytes(data), content_type="application/octet-stream",
                                               checksum="crc32c", if_generation_match=int(version or 0))  # fmt: skip
        except PreconditionFailed:
            return False
        return True

    def put_file(self, key, path):
        blob = self._blob(key)
        blob.upload_from_filename(path, content_type="application/octet-stream", checksum="crc32c")
        if not blob.crc32c:
            raise RuntimeError(f"gs://{self.bucket.name}/{key}: the upload's answer has no crc32c")
        return "crc32c:" + blob.crc32c

    def get_bytes(self, key):
        try:
            return self._blob(key).download_as_bytes(checksum="crc32c")
        except self._not_found:
            return None

    def _download_to(self, key, sink):
        try:
            self._blob(key).download_to_file(sink, checksum="crc32c")
        except self._not_found:
            return False
        return True

    def list(self, prefix):
        return {b.name: int(b.size or 0) for b in self.client.list_blobs(self.bucket, prefix=prefix)}

    def delete(self, key):
        try:
            self._blob(key).delete()
        except self._not_found:
            pass


# ------------------------------------------------------------------------------------------ Azure Blob

# The Blob service version the agent speaks (x-ms-version). Pinned rather than the SDK's newest, which follows
# each SDK release: this one Azure Storage and Azurite (the tests' stand-in, azurite@3) both serve.
AZURE_BLOB_API_VERSION = "2025-11-05"


class AzureBlobStore(ObjectStore):
    """azure-storage-blob; --bucket is 'account/container'. Managed identity (azure-identity, the IMDS token for
    https://storage.azure.com/), or the account key in AZURE_STORAGE_KEY. Part size and concurrency are the
    store's when it is made."""

    def __init__(self, bucket: str, metadata_url: str | None = None):
        if "/" not in bucket:
            raise ValueError("azure --bucket must be 'storageaccount/container'")
        self.account, container = bucket.split("/", 1)
        md = metadata_base("azure", metadata_url)
        if md != DEFAULT_METADATA["azure"]:
            # azure-identity (and MSAL under it) find the IMDS by this variable, read at each token request
            os.environ["AZURE_POD_IDENTITY_AUTHORITY_HOST"] = md
        from azure.storage.blob import ContainerClient, ExponentialRetry

        key = os.environ.get("AZURE_STORAGE_KEY")
        if key:
            credential = {"account_name": self.account, "account_key": key}
        else:
            from azure.identity import ManagedIdentityCredential

            credential = ManagedIdentityCredential(client_id=os.environ.get("AZURE_CLIENT_ID") or None)
        endpoint = os.environ.get("TRAINFLEET_AZURE_BLOB_ENDPOINT") or f"https://{self.account}.blob.core.windows.net"
        self._single_put_max = self.part_size  # up to this size a blob goes in one Put Blob
        self.container = ContainerClient(
            endpoint.rstrip("/"),
            container,
            credential=credential,
            api_version=AZURE_BLOB_API_VERSION,
            max_block_size=self.part_size,
            max_single_put_size=self._single_put_max,
            # the SDK's default waits 15 s before its first retry: most of a 30 s notice window
            retry_policy=ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=5, random_jitter_range=1),
        )
        from azure.core.exceptions import ResourceNotFoundError

        self._not_found = ResourceNotFoundError

    def put_bytes(self, key, data):
        self.container.get_blob_client(key).upload_blob(bytes(data), overwrite=True, validate_content="md5")

    def put_file(self, key, path):
        size = os.path.getsize(path)
        running = Checksum("md5")
        with open(path, "rb") as f:
            reader = _HashingReader(f, running)
            # With validate_content each block in flight is held in memory, and files upload `concurrency` at a
            # time (checkpoints.upload_part): a quarter of that per file keeps it to concurrency^2/4 blocks
            # (8 x 2 x 64 MiB = 1 GiB at the defaults) instead of concurrency^2 (4 GiB).
            answer = self.container.get_blob_client(key).upload_blob(
                reader, length=size, overwrite=True, validate_content="md5",
                max_concurrency=max(1, self.concurrency // 4),
            )  # fmt: skip
        if reader.bytes_read != size:
            raise RuntimeError(f"{path}: read {reader.bytes_read} bytes of {size} (file changed?)")
        token = running.token()
        if size <= self._single_put_max and answer.get("content_md5"):  # one Put Blob: the service's own MD5
            stored = "md5:" + base64.b64encode(answer["content_md5"]).decode()
            if stored != token:
                raise RuntimeError(f"{key}: the service stored MD5 {stored}, the file read as {token}")
        return token

    def get_bytes(self, key):
        try:
            return self.container.download_blob(key).readall()
        except self._not_found:
            return None

    def _download_to(self, key, sink):
        try:
            # one connection: the chunks arrive in order, for the running checksum
            self.container.download_blob(key, max_concurrency=1).readinto(sink)
        except self._not_found:
            return False
        return True

    def list(self, prefix):
        return {b.name: int(b.size) for b in self.container.list_blobs(name_starts_with=prefix)}

    def stored_checksum(self, key):
        try:
            md5 = self.container.get_blob_client(key).get_blob_properties().content_settings.content_md5
        except self._not_found:
            return None
        return "md5:" + base64.b64encode(md5).decode() if md5 else None  # none for a blob built from blocks

    def get_versioned(self, key):
        try:
            downloader = self.container.download_blob(key)
        except self._not_found:
            return None, None
        return downloader.readall(), downloader.properties.etag

    def put_if(self, key, data, version):
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

        blob = self.container.get_blob_client(key)
        try:
            if version is None:  # overwrite=False: If-None-Match: *
                blob.upload_blob(bytes(data), overwrite=False, validate_content="md5")
            else:
                blob.upload_blob(bytes(data), overwrite=True, validate_content="md5", etag=version,
                                 match_condition=MatchConditions.IfNotModified)  # fmt: skip
        except (ResourceExistsError, ResourceModifiedError):
            return False
        return True

    def delete(self, key):
        try:
            self.container.delete_blob(key)
        except self._not_found:
            pass


# ------------------------------------------------------------------------------------------ factory


def make_store(cloud: str, bucket: str, metadata_url: str | None = None) -> ObjectStore:
    route_sdk_logs()
    return {"aws": S3Store, "gcp": GcsStore, "azure": AzureBlobStore}[cloud](bucket, metadata_url)

