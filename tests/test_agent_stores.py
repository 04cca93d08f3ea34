"""The agent's object stores (templates/agent/trainfleet_agent/stores.py) over each cloud's SDK, against local
stand-ins: moto's S3 server, gcp-storage-emulator, Azurite (shared key, plain HTTP here; tests/test_agent_azure.py
runs the managed-identity, HTTPS path as a node does).

What each stand-in checks of the integrity chain, and what the proxies of tests/storage_auth_proxies.py add:
- moto stores the x-amz-checksum-crc64nvme a client sends without checking it, and computes a multipart upload's
  FULL_OBJECT CRC64NVME itself over the assembled parts (with awscrt). S3ChecksumGate checks the header against
  the body as S3 does (400 BadDigest).
- gcp-storage-emulator checks the crc32c a multipart (small) upload declares (409 here; GCS answers 400) and
  computes crc32c for every object; the SDK compares that with its own running CRC32C after a resumable upload.
- Azurite checks each request's Content-MD5 (400) and computes Content-MD5 for a blob sent in one Put Blob.
A byte flipped in transit (a proxy's `flip`) must therefore never end as a stored object reported durable.

Expected checksums come from the bytes each test writes, computed here with awscrt (CRC64NVME, CRC32C) and
hashlib (MD5, SHA-256), whose outputs are first pinned to the CRC catalogue's check values.
"""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
from pathlib import Path

import pytest

from tests.agent_support import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    load_agent_module,
)
from tests.metadata_servers import AwsImds
from tests.storage_auth_proxies import (
    ForwardingProxy,
    GcsPreconditionGate,
    S3ChecksumGate,
    is_upload_part,
    s3_error,
)

agent = load_agent_module()
MiB = 1 << 20


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def crc64nvme(data: bytes) -> str:
    from awscrt import checksums

    return "crc64nvme:" + b64(checksums.crc64nvme(data).to_bytes(8, "big"))


def crc32c(data: bytes) -> str:
    from awscrt import checksums

    return "crc32c:" + b64(checksums.crc32c(data).to_bytes(4, "big"))


def md5(data: bytes) -> str:
    return "md5:" + b64(hashlib.md5(data).digest())


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


EXPECTED = {"aws": crc64nvme, "gcp": crc32c, "azure": md5}


# ------------------------------------------------------------------------------------- checksum tokens


def test_the_reference_checksums_give_the_crc_catalogues_check_values():
    """https://reveng.sourceforge.io/crc-catalogue/all.htm: CRC-64/NVME check=0xae8b14860a799888 and
    CRC-32/ISCSI (CRC32C) check=0xe3069283, both over b"123456789"; S3 and GCS send the CRC big-endian."""
    assert crc64nvme(b"123456789") == "crc64nvme:" + b64(bytes.fromhex("ae8b14860a799888"))
    assert crc32c(b"123456789") == "crc32c:" + b64(bytes.fromhex("e3069283"))


@pytest.mark.parametrize("algorithm, reference", [("crc64nvme", crc64nvme), ("crc32c", crc32c), ("md5", md5),
                                                   ("sha256", sha256)])  # fmt: skip
def test_a_running_checksum_over_chunks_is_the_tokens_value(algorithm, reference):
    data = os.urandom(3 * MiB + 7)
    running = agent.Checksum(algorithm)
    for i in range(0, len(data), 1_000_003):
        running.update(data[i : i + 1_000_003])
    assert running.token() == reference(data)
    assert agent.CHECKSUM_RE.fullmatch(running.token())  # the manifest's own check takes it


def test_an_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="unsupported checksum 'xxhash64'"):
        agent.Checksum("xxhash64")


# ------------------------------------------------------------------------------------- the three stores


def boto3_s3(url: str):
    import boto3

    return boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")  # fmt: skip


class Backend:
    """One cloud's store made the way the agent makes it, pointed at its stand-in, possibly through a proxy."""

    def __init__(self, cloud: str, request, monkeypatch):
        self.cloud, self.request, self.monkeypatch = cloud, request, monkeypatch
        self.bucket = "ckpt-" + uuid.uuid4().hex[:10]
        self.proxies: list[ForwardingProxy] = []
        if cloud == "aws":
            self.upstream = request.getfixturevalue("moto").url
            for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}.items():
                monkeypatch.setenv(k, v)
            monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
            boto3_s3(self.upstream).create_bucket(Bucket=self.bucket)
        elif cloud == "gcp":
            gcs = request.getfixturevalue("gcs")
            self.upstream, self.bucket = gcs.url, gcs.bucket("ckpt-stores")  # keys are unique per test
            monkeypatch.delenv("TRAINFLEET_GCS_ENDPOINT", raising=False)
        else:
            self.upstream = request.getfixturevalue("azurite").endpoint
            self.bucket = f"{AZURITE_ACCOUNT}/{self.bucket}"
            monkeypatch.setenv("AZURE_STORAGE_KEY", AZURITE_KEY)
            self.store().container.create_container()
        self.prefix = "t-" + uuid.uuid4().hex[:8] + "/"

    def store(self, through: ForwardingProxy | None = None, part_size: int = 5 * MiB):
        url = through.url if through else self.upstream
        if self.cloud == "aws":
            self.monkeypatch.setenv("AWS_ENDPOINT_URL_S3", url)
        elif self.cloud == "gcp":
            self.monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        else:
            self.monkeypatch.setenv("TRAINFLEET_AZURE_BLOB_ENDPOINT", url + (f"/{AZURITE_ACCOUNT}" if through else ""))
        cls = {"aws": agent.S3Store, "gcp": agent.GcsStore, "azure": agent.AzureBlobStore}[self.cloud]
        self.monkeypatch.setattr(cls, "part_size", part_size)  # Azure reads it when the store is made
        return cls(self.bucket)

    def proxy(self, proxy_cls=ForwardingProxy, **kw) -> ForwardingProxy:
        upstream = self.upstream.rsplit(f"/{AZURITE_ACCOUNT}", 1)[0] if self.cloud == "azure" else self.upstream
        p = proxy_cls(upstream, **kw)
        p.preserve_host = True  # GCS: a resumable upload's session URI names the proxy
        self.proxies.append(p.start())
        return p

    def stop(self):
        for p in self.proxies:
            p.stop()


@pytest.fixture(params=["aws", "gcp", "azure"])
def backend(request, monkeypatch):
    b = Backend(request.param, request, monkeypatch)
    yield b
    b.stop()


def write(tmp_path: Path, size: int, name: str = "f.bin") -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return path, data


# google-cloud-storage downloads with "Range: bytes=0-"; GCS answers that for an empty object with 416 and
# "Content-Range: bytes */0", which the SDK takes as empty content, but gcp-storage-emulator answers 206 with
# "bytes 0--1/0" (its handlers/objects.py `download`), which the SDK rejects: no empty object on GCP here.
SIZES = [(cloud, size) for cloud in ("aws", "gcp", "azure") for size in (0, 100, 11 * MiB + 5)
         if (cloud, size) != ("gcp", 0)]  # fmt: skip


@pytest.mark.parametrize("cloud, size", SIZES)
def test_put_file_returns_the_services_checksum_and_download_verifies_it(cloud, size, request, monkeypatch, tmp_path):
    """11 MiB in 5 MiB parts: an S3 multipart upload, a GCS resumable upload (over 8 MiB), Azure blocks."""
    backend = Backend(cloud, request, monkeypatch)
    store = backend.store()
    path, data = write(tmp_path, size)
    key = backend.prefix + "shard.pt"
    token = store.put_file(key, str(path))
    assert token == EXPECTED[backend.cloud](data)
    assert store.list(backend.prefix) == {key: size}
    out = tmp_path / "back.bin"
    assert store.download(key, str(out), token) is True
    assert out.read_bytes() == data
    # a manifest written before these stores carries a sha256 token: still verified
    assert store.download(key, str(out), sha256(data)) is True
    assert store.download(key, str(out), sha256(data + b"x")) is False


def test_a_replaced_object_fails_the_manifests_checksum(backend, tmp_path):
    """Same size, other bytes (written by anyone else): the service's own checksum of the new bytes is fine, the
    manifest's token is not."""
    store = backend.store()
    path, data = write(tmp_path, 4096)
    key = backend.prefix + "shard.pt"
    token = store.put_file(key, str(path))
    store.put_bytes(key, bytes(reversed(data)))
    assert store.download(key, str(tmp_path / "back.bin"), token) is False


def test_missing_objects(backend, tmp_path):
    store = backend.store()
    key = backend.prefix + "nope"
    assert store.get_bytes(key) is None
    assert store.download(key, str(tmp_path / "x"), crc64nvme(b"")) is False
    store.delete(key)  # not an error
    store.put_bytes(key, b"LATEST")
    assert store.get_bytes(key) == b"LATEST"
    store.delete(key)
    assert store.get_bytes(key) is None and store.list(backend.prefix) == {}


def test_latest_is_written_only_over_the_version_its_writer_read(backend):
    """Issue 29 #15: two committers each read LATEST and then wrote it; the slower one moved it backward. Each
    cloud's conditional write (S3 If-Match / If-None-Match, GCS ifGenerationMatch, Azure If-Match /
    If-None-Match) refuses a write over a version its writer did not read. gcp-storage-emulator ignores
    preconditions, so GCP goes through GcsPreconditionGate, which answers as GCS does (412 conditionNotMet)."""
    store = backend.store(backend.proxy(GcsPreconditionGate)) if backend.cloud == "gcp" else backend.store()
    key = backend.prefix + "LATEST"
    assert store.get_versioned(key) == (None, None)
    assert store.put_if(key, b"step-00000005", None) is True
    assert store.put_if(key, b"step-00000004", None) is False, "written over an object its writer never read"
    data, read_at_5 = store.get_versioned(key)
    assert data == b"step-00000005" and read_at_5
    assert store.put_if(key, b"step-00000007", read_at_5) is True
    assert store.put_if(key, b"step-00000006", read_at_5) is False, "a stale read moved LATEST backward"
    assert store.get_bytes(key) == b"step-00000007"


def test_two_committers_racing_never_move_latest_backward(backend):
    """The race itself: committer A read LATEST at 5 to write 9; committer B moves it to 7 in between. A's
    conditional write fails, it reads again, and 9 > 7 still goes in; had B written 11, A would leave it."""
    store = backend.store(backend.proxy(GcsPreconditionGate)) if backend.cloud == "gcp" else backend.store()
    prefix = backend.prefix.rstrip("/")
    store.put_bytes(prefix + "/LATEST", b"step-00000005")
    real, raced = store.get_versioned, []

    def b_commits_in_between(key):
        answer = real(key)
        if not raced:
            raced.append(True)
            assert agent.advance_latest(store, prefix, 11) == 11  # B, between A's read and A's write
        return answer

    store.get_versioned = b_commits_in_between
    assert agent.advance_latest(store, prefix, 9) == 11
    assert store.get_bytes(prefix + "/LATEST") == b"step-00000011"


@pytest.mark.parametrize("tampered", [False, True])
def test_the_committer_takes_each_files_checksum_from_the_store_not_from_the_part(backend, tmp_path, tampered):
    """Issue 29 #13: PART.json's checksums are the node's own claim. Another node writing over a file of that part
    (same name, same size) after it was declared left a manifest whose tokens described bytes no longer there,
    or, with the tokens rewritten too, other bytes taken as that node's. The committer reads each object's checksum
    as the service keeps it (S3 HeadObject CRC64NVME, GCS crc32c, Azure Content-MD5 of a blob put whole) and does
    not commit a part whose objects disagree with it."""
    store = backend.store()
    prefix = backend.prefix.rstrip("/")
    ckpt = tmp_path / "ckpt"
    shard = ckpt / "step-00000003" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(os.urandom(4096))
    (shard.parent / "COMPLETE").write_text('{"step": 3, "node_rank": 0, "nodes": 1}')
    agent.upload_part(store, prefix, str(ckpt), 3)
    if tampered:
        store.put_bytes(f"{prefix}/step-00000003/node-0/{shard.name}", os.urandom(4096))
    manifest = agent.commit(store, prefix, 3, 1)
    assert (manifest is None) is tampered
    assert agent.read_latest(store, prefix) == (None if tampered else 3)


def test_listing_pages_through_every_key(backend):
    """More keys than one page of S3's ListObjectsV2 (1000) would be slow here; the SDKs page by themselves,
    so a small page size is what is checked: every key with its size, only under the prefix."""
    store = backend.store()
    keys = {f"{backend.prefix}step-{i:08d}/f": i for i in range(12)}
    for k, n in keys.items():
        store.put_bytes(k, b"x" * n)
    store.put_bytes(backend.prefix.rstrip("/") + "-other/f", b"y")
    assert store.list(backend.prefix) == keys


FLIP_WHERE = {
    # the first UploadPart (S3), a resumable upload's first chunk (GCS), the first Put Block (Azure)
    "aws": is_upload_part,
    "gcp": lambda method, path, headers: method == "PUT" and "upload_id=" in path,
    "azure": lambda method, path, headers: method == "PUT" and "comp=block" in path,
}


def test_a_byte_flipped_in_transit_is_never_stored_as_durable(backend, tmp_path):
    """S3 (the gate, as S3 does) rejects the part whose CRC64NVME does not match; GCS stores the chunk, and the
    SDK, finding GCS's CRC32C of the object differs from its own, deletes it and raises; Azurite rejects the
    block whose Content-MD5 does not match. Either way put_file raises and no object is left under the key."""
    proxy_cls = S3ChecksumGate if backend.cloud == "aws" else ForwardingProxy
    proxy = backend.proxy(proxy_cls, flip=FLIP_WHERE[backend.cloud])
    store = backend.store(through=proxy, part_size=1 * MiB)
    path, _data = write(tmp_path, 9 * MiB + 3)
    key = backend.prefix + "shard.pt"
    with pytest.raises(Exception) as failed:
        store.put_file(key, str(path))
    assert proxy.flipped, "the proxy damaged no request"
    print(f"\n{backend.cloud}: {type(failed.value).__name__}: {str(failed.value)[:200]}")
    assert key not in backend.store().list(backend.prefix)
    why = {"aws": "BadDigest", "gcp": "did not match", "azure": "md5"}[backend.cloud]
    assert why in str(failed.value).lower() if backend.cloud == "azure" else why in str(failed.value)
    if backend.cloud == "aws":
        assert not boto3_s3(backend.upstream).list_multipart_uploads(Bucket=backend.bucket).get("Uploads")
    if backend.cloud == "gcp":
        assert type(failed.value).__name__ == "DataCorruption"


def test_a_small_upload_flipped_in_transit_is_refused(backend, tmp_path):
    """One request (S3 PutObject, GCS multipart upload, Azure Put Blob) carrying its checksum for the service."""
    flip = {
        "aws": lambda m, p, h: m == "PUT",
        "gcp": lambda m, p, h: m == "POST" and "uploadType=multipart" in p,
        "azure": lambda m, p, h: m == "PUT" and "comp=" not in p,
    }[backend.cloud]
    proxy = backend.proxy(S3ChecksumGate if backend.cloud == "aws" else ForwardingProxy, flip=flip)
    store = backend.store(through=proxy)
    path, _data = write(tmp_path, 64 << 10)
    key = backend.prefix + "small.pt"
    with pytest.raises(Exception) as failed:  # noqa: B017 - each SDK raises its own error class
        store.put_file(key, str(path))
    assert proxy.flipped and key not in backend.store().list(backend.prefix)
    why = {"aws": "BadDigest", "gcp": "CRC32C", "azure": "MD5"}[backend.cloud]
    assert why.lower() in str(failed.value).lower(), failed.value


def test_every_s3_upload_request_carries_a_crc64nvme_that_s3_checks(monkeypatch, request, tmp_path):
    b = Backend("aws", request, monkeypatch)
    try:
        gate = b.proxy(S3ChecksumGate)
        store = b.store(through=gate)
        path, data = write(tmp_path, 11 * MiB)
        assert store.put_file(b.prefix + "big", str(path)) == crc64nvme(data)
        store.put_bytes(b.prefix + "MANIFEST.json", b"{}")
        puts = gate.checked
        assert len(puts) == 3 + 1  # three parts, one PutObject
        assert {(alg, ok) for _path, alg, ok in puts} == {("crc64nvme", True)}
        head = boto3_s3(b.upstream).head_object(Bucket=b.bucket, Key=b.prefix + "big", ChecksumMode="ENABLED")
        assert head["ChecksumType"] == "FULL_OBJECT"  # one CRC of the whole object, not a CRC of part CRCs
    finally:
        b.stop()


# ------------------------------------------------------------------------------------- S3 auth


class S3RoleCheck(ForwardingProxy):
    """S3's check that a request is signed with known credentials, for the one identity a node has: its role's
    temporary keys (access key id in the SigV4 Credential scope, the session token in X-Amz-Security-Token).
    Anything else is refused as S3 refuses an unknown key: 403 InvalidAccessKeyId
    (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html). The signature itself is moto's to
    take; moto does not check it."""

    def __init__(self, upstream: str, key_id: str, token: str):
        super().__init__(upstream)
        self.key_id, self.token = key_id, token

    def refusal(self, method, path, headers, body):
        auth = headers.get("Authorization") or ""
        if auth.startswith(f"AWS4-HMAC-SHA256 Credential={self.key_id}/") and headers.get("X-Amz-Security-Token") == self.token:
            return None
        return s3_error(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")


def test_s3_requests_are_signed_with_the_instance_roles_credentials_from_imdsv2(moto, monkeypatch, tmp_path):
    imds = AwsImds().start()
    try:
        key_id, _secret, token = imds.creds
        check = S3RoleCheck(moto.url, key_id, token).start()
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                     "AWS_DEFAULT_REGION", "AWS_PROFILE"):  # fmt: skip
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))  # no developer's profile either
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", check.url)
        bucket = "ckpt-" + uuid.uuid4().hex[:10]
        boto3_s3(moto.url).create_bucket(Bucket=bucket)
        store = agent.S3Store(bucket, imds.url)
        path, data = write(tmp_path, 6 * MiB)
        store.part_size = 5 * MiB
        assert store.put_file("k/big", str(path)) == crc64nvme(data)
        assert store.get_bytes("k/none") is None and store.list("k/") == {"k/big": len(data)}
        assert check.statuses() and set(check.statuses()) <= {200, 204, 404}, check.seen
        assert imds.count("/latest/api/token", 200) >= 1, "IMDSv2: a session token first"
        assert imds.count("/iam/security-credentials/trainfleet-node", 200) >= 1
        assert imds.count("/placement/region", 200) == 1  # the region, from the instance's own placement
        check.stop()
    finally:
        imds.stop()


def test_without_credentials_the_s3_store_says_so(monkeypatch, tmp_path):
    import socket

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "1")
    with socket.socket() as s:  # bound, never listening: connections are refused at once
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(RuntimeError, match="no AWS credentials"):
            agent.S3Store("b", dead)
