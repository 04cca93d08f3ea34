"""Object stores: S3, GCS and Azure Blob behind one small interface."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import json
import os
import urllib.parse
import xml.etree.ElementTree as ET

from .common import CHUNK
from .credentials import AwsCredentials, BearerToken, _q, aws_region, sigv4_sign
from .http_client import FileSlice, HTTPError, hash_file, http_open, http_request, run_parallel, with_retries


class ObjectStore:
    """The one interface the checkpoint code uses; keys are full object names in the bucket.

    Integrity is a checksum token "<algorithm>:<value>" (e.g. "sha256:<hex>"): `put_file` returns the token of
    what the service stored and checked, `download` verifies the bytes it wrote against a token.
    """

    part_size = int(os.environ.get("TRAINFLEET_PART_SIZE", str(64 << 20)))
    concurrency = int(os.environ.get("TRAINFLEET_UPLOAD_CONCURRENCY", "8"))

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def put_file(self, key: str, path: str) -> str:
        """Upload a file, streamed (large ones in parts, in parallel); return its checksum token."""
        size = os.path.getsize(path)
        digest, part_hashes = hash_file(path, self.part_size)
        self._put_file(key, path, size, digest, part_hashes)
        return "sha256:" + digest

    def _put_file(self, key: str, path: str, size: int, sha256: str, part_hashes: list[str] | None = None):
        raise NotImplementedError

    def get_bytes(self, key: str) -> bytes | None:
        raise NotImplementedError

    def download(self, key: str, path: str, checksum: str) -> bool:
        """Stream an object to `path`; True if what was written matches the checksum token."""
        algorithm, _, value = checksum.partition(":")
        if algorithm != "sha256":
            raise ValueError(f"unsupported checksum {algorithm!r}")
        return self._download(key, path) == value

    def _download(self, key: str, path: str) -> str:
        raise NotImplementedError

    def list(self, prefix: str) -> dict[str, int]:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def _stream_to_file(self, resp, path: str) -> str:
        h = hashlib.sha256()
        with open(path, "wb") as f:
            while True:
                b = resp.read(CHUNK)
                if not b:
                    break
                h.update(b)
                f.write(b)
        return h.hexdigest()


class S3Store(ObjectStore):
    def __init__(self, bucket: str, metadata_url: str | None = None):
        self.bucket = bucket
        self.creds = AwsCredentials(metadata_url)
        self.region = aws_region(metadata_url)
        ep = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if ep:
            self.base = ep.rstrip("/") + "/" + bucket  # path-style for custom endpoints
        elif "." in bucket:  # a virtual-hosted name with dots would not match the TLS certificate
            self.base = f"https://s3.{self.region}.amazonaws.com/{bucket}"
        else:
            self.base = f"https://{bucket}.s3.{self.region}.amazonaws.com"

    def _url(self, key: str, query: dict | None = None) -> str:
        u = self.base + "/" + _q(key, safe="/-_.~")
        if query is not None:
            u += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return u

    def _req(self, method, url, headers=None, body=None, payload_hash=None, ok=(200,), stream=False):
        if payload_hash is None:
            payload_hash = hashlib.sha256(body if isinstance(body, bytes) else b"").hexdigest()
        hdrs = sigv4_sign(method, url, self.region, "s3", self.creds.get(), headers or {}, payload_hash)
        if stream:
            conn, resp = http_open(method, url, hdrs, body, timeout=60)
            if resp.status not in ok:
                data = resp.read()
                conn.close()
                raise HTTPError(resp.status, data, f"S3 {method} {url}")
            return conn, resp
        r = http_request(method, url, hdrs, body, timeout=60)
        if r.status not in ok:
            raise HTTPError(r.status, r.data, f"S3 {method} {url}")
        return r

    def put_bytes(self, key, data):
        with_retries(lambda: self._req("PUT", self._url(key), {}, data), "s3 put " + key)

    def _put_file(self, key, path, size, sha256, part_hashes=None):
        if size <= self.part_size:

            def once():
                with open(path, "rb") as f:
                    self._req("PUT", self._url(key), {"Content-Length": str(size)}, f, payload_hash=sha256)

            with_retries(once, "s3 put " + key)
            return
        if part_hashes is None:
            part_hashes = hash_file(path, self.part_size)[1]
        offsets = range(0, size, self.part_size)
        if len(part_hashes) != len(offsets):
            raise ValueError(
                f"{path}: {len(part_hashes)} part hashes for {len(offsets)} parts (file changed?)"
            )
        r = with_retries(lambda: self._req("POST", self._url(key, {"uploads": ""})), "s3 create multipart")
        upload_id = _xml_find(r.data, "UploadId")

        def part(n, off, ln, ph):
            def once():
                with FileSlice(path, off, ln) as body:
                    url = self._url(key, {"partNumber": str(n), "uploadId": upload_id})
                    return self._req("PUT", url, {"Content-Length": str(ln)}, body, payload_hash=ph)

            return n, with_retries(once, f"s3 part {n} {key}").headers.get("etag", "")

        jobs = [
            (lambda n=n, off=off, ph=ph: part(n, off, min(self.part_size, size - off), ph))
            for n, (off, ph) in enumerate(zip(offsets, part_hashes), start=1)  # noqa: B905 - py3.8 nodes
        ]
        try:
            parts = run_parallel(jobs, self.concurrency)
            xml = (
                "<CompleteMultipartUpload>"
                + "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts)
                + "</CompleteMultipartUpload>"
            )
            def complete():
                r = self._req("POST", self._url(key, {"uploadId": upload_id}), {}, xml.encode())
                # S3 may answer 200 and still fail: "a 200 OK response can contain either a success or an
                # error" (CompleteMultipartUpload API reference); the body is then an <Error> document.
                if b"<Error>" in r.data[:512]:
                    try:
                        code = _xml_find(r.data, "Code") or "unknown"
                    except Exception:  # noqa: BLE001 - an unreadable error document is still an error
                        code = "unknown"
                    status = 500 if code in ("InternalError", "SlowDown", "ServiceUnavailable") else 400
                    raise HTTPError(status, r.data, f"S3 complete multipart {key}: 200 with error {code}")
                return r

            with_retries(complete, "s3 complete multipart")
        except BaseException:
            try:
                self._req("DELETE", self._url(key, {"uploadId": upload_id}), ok=(200, 204))
            except Exception:  # noqa: BLE001
                pass
            raise

    def get_bytes(self, key):
        try:
            return with_retries(lambda: self._req("GET", self._url(key)), "s3 get " + key).data
        except HTTPError as e:
            if e.status in (404, 403):
                return None
            raise

    def _download(self, key, path):
        def once():
            conn, resp = self._req("GET", self._url(key), stream=True)
            try:
                return self._stream_to_file(resp, path)
            finally:
                conn.close()

        return with_retries(once, "s3 download " + key)

    def list(self, prefix):
        out: dict[str, int] = {}
        token = None
        while True:
            q = {"list-type": "2", "prefix": prefix}
            if token:
                q["continuation-token"] = token
            url = self.base + "/?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote)
            r = with_retries(lambda url=url: self._req("GET", url), "s3 list")
            root = ET.fromstring(r.data)
            ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
            for c in root.findall(f"{ns}Contents"):
                out[c.findtext(f"{ns}Key")] = int(c.findtext(f"{ns}Size") or 0)
            if (root.findtext(f"{ns}IsTruncated") or "false").lower() != "true":
                return out
            token = root.findtext(f"{ns}NextContinuationToken")

    def delete(self, key):
        with_retries(lambda: self._req("DELETE", self._url(key), ok=(200, 204)), "s3 delete " + key)


def _xml_find(data: bytes, tag: str) -> str:
    for el in ET.fromstring(data).iter():
        if el.tag.split("}")[-1] == tag:
            return el.text or ""
    raise ValueError(f"no <{tag}> in response")


class GcsStore(ObjectStore):
    def __init__(self, bucket: str, metadata_url: str | None = None):
        self.bucket = bucket
        emu = os.environ.get("STORAGE_EMULATOR_HOST")
        if emu:
            self.base = (emu if "://" in emu else "http://" + emu).rstrip("/")
            self.token = None
        else:
            self.base = os.environ.get("TRAINFLEET_GCS_ENDPOINT", "https://storage.googleapis.com").rstrip(
                "/"
            )
            self.token = BearerToken("gcp", metadata_url)

    def _h(self, extra=None):
        h = dict(extra or {})
        if self.token is not None:
            h["Authorization"] = "Bearer " + self.token.get()
        return h

    def _obj(self, key):
        return f"{self.base}/storage/v1/b/{_q(self.bucket)}/o/{_q(key, safe='')}"

    def _check(self, r, what, ok=(200,)):
        if r.status not in ok:
            raise HTTPError(r.status, r.data, what)
        return r

    def _upload(self, key, body, size):
        """Large files: a streamed ``uploadType=media`` request. Small ones: ``uploadType=multipart``."""
        if isinstance(body, (bytes, bytearray)):  # noqa: UP038
            boundary = "trainfleet" + hashlib.sha256(bytes(body)).hexdigest()[:24]
            meta = json.dumps({"name": key}).encode()
            data = b"".join(
                [
                    f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                    meta,
                    f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                    bytes(body),
                    f"\r\n--{boundary}--\r\n".encode(),
                ]
            )
            url = f"{self.base}/upload/storage/v1/b/{_q(self.bucket)}/o?uploadType=multipart"
            hdrs = self._h({"Content-Type": f"multipart/related; boundary={boundary}"})
            self._check(http_request("POST", url, hdrs, data, timeout=60), "gcs upload " + key)
            return
        q = urllib.parse.urlencode({"uploadType": "media", "name": key})
        url = f"{self.base}/upload/storage/v1/b/{_q(self.bucket)}/o?{q}"
        hdrs = self._h({"Content-Type": "application/octet-stream", "Content-Length": str(size)})
        self._check(http_request("POST", url, hdrs, body, timeout=60), "gcs upload " + key)

    def put_bytes(self, key, data):
        with_retries(lambda: self._upload(key, data, len(data)), "gcs put " + key)

    def _put_file(self, key, path, size, sha256, part_hashes=None):
        if size < CHUNK:
            with open(path, "rb") as f:
                data = f.read()
            return self.put_bytes(key, data)

        def once():
            with open(path, "rb") as f:
                self._upload(key, f, size)

        with_retries(once, "gcs put " + key)

    def get_bytes(self, key):
        def once():
            r = http_request("GET", self._obj(key) + "?alt=media", self._h(), timeout=60)
            if r.status == 404:
                return None
            return self._check(r, "gcs get " + key).data

        return with_retries(once, "gcs get " + key)

    def _download(self, key, path):
        def once():
            conn, resp = http_open("GET", self._obj(key) + "?alt=media", self._h(), timeout=60)
            try:
                if resp.status != 200:
                    raise HTTPError(resp.status, resp.read(), "gcs download " + key)
                return self._stream_to_file(resp, path)
            finally:
                conn.close()

        return with_retries(once, "gcs download " + key)

    def list(self, prefix):
        out: dict[str, int] = {}
        page = None
        while True:
            q = {"prefix": prefix}
            if page:
                q["pageToken"] = page
            url = f"{self.base}/storage/v1/b/{_q(self.bucket)}/o?" + urllib.parse.urlencode(q)
            r = with_retries(
                lambda url=url: self._check(http_request("GET", url, self._h()), "gcs list"), "gcs list"
            )
            doc = r.json()
            for it in doc.get("items", []):
                out[it["name"]] = int(it.get("size", 0))
            page = doc.get("nextPageToken")
            if not page:
                return out

    def delete(self, key):
        with_retries(
            lambda: self._check(
                http_request("DELETE", self._obj(key), self._h()), "gcs delete", (200, 204, 404)
            ),
            "gcs delete " + key,
        )


class AzureBlobStore(ObjectStore):
    """Azure Blob REST; --bucket is 'account/container'. Bearer token from managed identity, or shared key."""

    VERSION = "2021-08-06"

    def __init__(self, bucket: str, metadata_url: str | None = None):
        if "/" not in bucket:
            raise ValueError("azure --bucket must be 'storageaccount/container'")
        self.account, self.container = bucket.split("/", 1)
        ep = os.environ.get("TRAINFLEET_AZURE_BLOB_ENDPOINT")
        self.base = (
            (ep.rstrip("/") if ep else f"https://{self.account}.blob.core.windows.net") + "/" + self.container
        )
        self.key = os.environ.get("AZURE_STORAGE_KEY")
        self.token = None if self.key else BearerToken("azure", metadata_url)

    def _sign(self, method, url, headers):
        h = dict(headers)
        h["x-ms-version"] = self.VERSION
        h["x-ms-date"] = email.utils.formatdate(usegmt=True)
        if self.token is not None:
            h["Authorization"] = "Bearer " + self.token.get()
            return h
        parts = urllib.parse.urlsplit(url)
        low = {k.lower(): str(v) for k, v in h.items()}
        length = low.get("content-length", "")
        if length == "0":
            length = ""
        std = [
            method,
            low.get("content-encoding", ""),
            low.get("content-language", ""),
            length,
            low.get("content-md5", ""),
            low.get("content-type", ""),
            "",
            low.get("if-modified-since", ""),
            low.get("if-match", ""),
            low.get("if-none-match", ""),
            low.get("if-unmodified-since", ""),
            low.get("range", ""),
        ]
        xms = "".join(f"{k}:{low[k].strip()}\n" for k in sorted(low) if k.startswith("x-ms-"))
        res = f"/{self.account}{urllib.parse.unquote(parts.path)}"
        q = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        for k in sorted(q, key=str.lower):
            res += f"\n{k.lower()}:{','.join(sorted(q[k]))}"
        sts = "\n".join(std) + "\n" + xms + res
        sig = base64.b64encode(
            hmac.new(base64.b64decode(self.key), sts.encode(), hashlib.sha256).digest()
        ).decode()
        h["Authorization"] = f"SharedKey {self.account}:{sig}"
        return h

    def _url(self, key, query=None):
        u = self.base + "/" + _q(key, safe="/-_.~")
        if query:
            u += "?" + urllib.parse.urlencode(query)
        return u

    def _req(self, method, url, headers=None, body=None, ok=(200, 201), stream=False):
        hdrs = self._sign(method, url, headers or {})
        if stream:
            conn, resp = http_open(method, url, hdrs, body, timeout=60)
            if resp.status not in ok:
                data = resp.read()
                conn.close()
                raise HTTPError(resp.status, data, f"blob {method}")
            return conn, resp
        r = http_request(method, url, hdrs, body, timeout=60)
        if r.status not in ok:
            raise HTTPError(r.status, r.data, f"blob {method} {url}")
        return r

    def put_bytes(self, key, data):
        hdrs = {"x-ms-blob-type": "BlockBlob", "Content-Length": str(len(data))}
        with_retries(lambda: self._req("PUT", self._url(key), hdrs, data), "blob put " + key)

    def _put_file(self, key, path, size, sha256, part_hashes=None):
        if size <= self.part_size:

            def once():
                with open(path, "rb") as f:
                    hdrs = {"x-ms-blob-type": "BlockBlob", "Content-Length": str(size)}
                    self._req("PUT", self._url(key), hdrs, f)

            with_retries(once, "blob put " + key)
            return

        def block(n, off):
            ln = min(self.part_size, size - off)
            bid = base64.b64encode(f"{n:08d}".encode()).decode()

            def once():
                with FileSlice(path, off, ln) as body:
                    url = self._url(key, {"comp": "block", "blockid": bid})
                    self._req("PUT", url, {"Content-Length": str(ln)}, body)

            with_retries(once, f"blob block {n} {key}")
            return bid

        jobs = [(lambda n=n, off=off: block(n, off)) for n, off in enumerate(range(0, size, self.part_size))]
        ids = run_parallel(jobs, self.concurrency)
        xml = '<?xml version="1.0" encoding="utf-8"?><BlockList>' + "".join(
            f"<Latest>{i}</Latest>" for i in ids
        )
        xml = (xml + "</BlockList>").encode()
        with_retries(
            lambda: self._req(
                "PUT", self._url(key, {"comp": "blocklist"}), {"Content-Length": str(len(xml))}, xml
            ),
            "blob block list",
        )

    def get_bytes(self, key):
        try:
            return with_retries(lambda: self._req("GET", self._url(key), ok=(200,)), "blob get").data
        except HTTPError as e:
            if e.status == 404:
                return None
            raise

    def _download(self, key, path):
        def once():
            conn, resp = self._req("GET", self._url(key), ok=(200,), stream=True)
            try:
                return self._stream_to_file(resp, path)
            finally:
                conn.close()

        return with_retries(once, "blob download " + key)

    def list(self, prefix):
        out: dict[str, int] = {}
        marker = ""
        while True:
            q = {"restype": "container", "comp": "list", "prefix": prefix}
            if marker:
                q["marker"] = marker
            url = self.base + "?" + urllib.parse.urlencode(q)
            r = with_retries(lambda url=url: self._req("GET", url, ok=(200,)), "blob list")
            root = ET.fromstring(r.data)
            for b in root.iter("Blob"):
                out[b.findtext("Name")] = int(b.findtext("Properties/Content-Length") or 0)
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return out

    def delete(self, key):
        with_retries(lambda: self._req("DELETE", self._url(key), ok=(200, 202, 404)), "blob delete " + key)


def make_store(cloud: str, bucket: str, metadata_url: str | None = None) -> ObjectStore:
    return {"aws": S3Store, "gcp": GcsStore, "azure": AzureBlobStore}[cloud](bucket, metadata_url)


