"""The shaped object store: one bucket (the service), and one `ObjectStore` per node over that node's own link.

Transfers take virtual time. A file moves a segment (SEGMENT_BYTES) at a time: first the latency of the segment's
requests (a connection's requests one after another), then its bytes, as a fluid flow that shares the node's link
and, where the cloud has one, the account's link max-min fairly with every other flow on them, per connection,
never above its connections' own rate (Network); rates are recomputed whenever a flow starts or ends. Each
request counts against the service's request-rate limit (per second, at the time its part starts); over the
limit the service answers as it does (S3 503 SlowDown, GCS 429, Azure 503) and the modelled SDK retries after its
backoff, as it does an injected fault (500); when the SDK's attempts or deadline run out the call raises
StoreError, as the SDK would. An object exists only once its last request is done: a node lost mid-upload leaves
nothing (S3's incomplete multipart upload is invisible to listings).
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from dataclasses import dataclass

from templates.agent.trainfleet_agent.stores import ObjectStore

from .clock import Clock
from .content import Contents, Identity
from .shapes import MiB, StoreShape

SEGMENT_BYTES = 4096 * MiB  # requests, then bytes, this much of a file at a time
LIST_PAGE = 1000  # keys per listing page (S3 ListObjectsV2, the others alike)


class StoreError(Exception):
    """What the SDK raises once its retries are spent (botocore ClientError, api-core RetryError, azure HttpResponseError)."""


class Link:
    """A link: its capacity shared max-min fairly by the flows on it, per connection (see Network)."""

    def __init__(self, bytes_per_s: float | None):
        self.capacity = bytes_per_s
        self.flows: set[Flow] = set()


class Flow:
    """One transfer in progress: `weight` connections, at most `cap` bytes/s, through its node's link and, where the
    cloud has one, the account's."""

    __slots__ = ("task", "left", "t", "rate", "weight", "cap", "node_link", "account", "finish")

    def __init__(self, task, nbytes, now, weight, cap, node_link, account):
        self.task, self.left, self.t, self.rate = task, float(nbytes), now, 0.0
        self.weight, self.cap, self.node_link, self.account = weight, cap, node_link, account
        self.finish = math.inf

    def remaining(self, now: float) -> float:
        return max(0.0, self.left - self.rate * (now - self.t))


def water_fill(capacity: float | None, items: list[tuple[Flow, int, float]]) -> dict:
    """Max-min fair shares of `capacity` among (flow, weight, cap): every connection the same rate, except flows
    held below it by their cap, whose leftover goes to the others."""
    if capacity is None:
        return {f: cap for f, _w, cap in items}
    out, left, weight = {}, capacity, sum(w for _f, w, _c in items)
    for f, w, cap in sorted(items, key=lambda x: x[2] / x[1]):
        share = left * w / weight
        out[f] = min(cap, share)
        left -= out[f]
        weight -= w
    return out


class Network:
    """Fluid transfers: each flow moves at its max-min fair rate, recomputed whenever a flow starts or ends on a
    link it shares; a task in `transfer` sleeps until its flow's predicted end, moved whenever its rate changes."""

    def __init__(self, clock: Clock):
        self.clock = clock

    def transfer(self, nbytes: float, node_link: Link, account: Link | None, weight: int, cap: float) -> None:
        clock = self.clock
        me = clock._me()
        flow = Flow(me, nbytes, clock.now, weight, cap, node_link, account)
        node_link.flows.add(flow)
        if account is not None:
            account.flows.add(flow)
        try:
            self._rebalance(node_link, account, flow)
            clock._block(me)  # woken at its end (the last time _rebalance pushed it)
        finally:
            node_link.flows.discard(flow)
            if account is not None:
                account.flows.discard(flow)
            self._rebalance(node_link, account, None)

    def _rebalance(self, node_link: Link, account: Link | None, new: Flow | None) -> None:
        now = self.clock.now
        shared = account is not None and account.capacity is not None
        flows = account.flows if shared else node_link.flows
        for f in flows:  # progress so far, at the old rates
            f.left, f.t = f.remaining(now), now
        rates: dict[Flow, float] = {}
        for link in {f.node_link for f in flows}:
            rates.update(water_fill(link.capacity, [(f, f.weight, f.cap) for f in link.flows]))
        if shared and sum(rates.values()) > account.capacity:
            rates = water_fill(account.capacity, [(f, f.weight, rates[f]) for f in flows])
        for f, rate in rates.items():
            if f is new or abs(rate - f.rate) > 1e-9 * max(rate, 1.0):
                f.rate = rate
                f.finish = now + (f.left / rate if rate > 0 else math.inf)
                if f.finish < math.inf:
                    self.clock._ready(f.task, f.finish)


class RateWindow:
    """Requests admitted per whole virtual second, up to `limit`."""

    def __init__(self, limit: float):
        self.limit = limit
        self.counts: Counter = Counter()

    def admit(self, at: float) -> bool:
        second = int(at)
        if self.counts[second] >= self.limit:
            return False
        self.counts[second] += 1
        if len(self.counts) > 4096:  # forget the distant past
            for s in [s for s in self.counts if s < second - 60]:
                del self.counts[s]
        return True


@dataclass
class StoredObject:
    size: int
    identity: Identity | None  # a checkpoint file's; None for the agent's own small objects
    token: str | None
    data: bytes | None
    at: float
    node: int


class Bucket:
    """The service: objects, request limits, the account's links, and the record the invariants read."""

    def __init__(self, clock: Clock, shape: StoreShape, contents: Contents, seed: int = 29):
        self.clock, self.shape, self.contents = clock, shape, contents
        self.objects: dict[str, StoredObject] = {}
        self.ingress, self.egress = Link(shape.ingress_bps), Link(shape.egress_bps)
        self.network = Network(clock)
        self.windows = {kind: RateWindow(limit) for kind, limit in shape.limits.items()}
        self.rng = random.Random(seed)
        self.stats: Counter = Counter()
        self.fetched: Counter = Counter()  # node -> bytes downloaded, ever (a restore counts its own difference)
        self.downloads: list[tuple[int, str, int]] = []  # (node, key, bytes), for the invariants
        self.manifests: list[tuple[float, dict]] = []  # every MANIFEST.json written, when
        self.latest: list[tuple[float, int]] = []  # every LATEST written, when, naming which step

    def put(self, key: str, obj: StoredObject) -> None:
        self.objects[key] = obj
        if key.endswith("/MANIFEST.json") and obj.data is not None:
            self.manifests.append((obj.at, json.loads(obj.data)))
        elif key.endswith("LATEST") and obj.data is not None:
            self.latest.append((obj.at, int(obj.data.decode().rsplit("-", 1)[1])))

    def latest_step(self) -> int | None:
        return self.latest[-1][1] if self.latest else None

    def request(self, kind: str, at: float, stream_delay: float) -> float:
        """One request sent at `at`: the extra seconds its retries take (backoff and their latency); StoreError
        when the SDK gives up."""
        shape, retry = self.shape, self.shape.retry
        window = self.windows[shape.limit_class(kind)]
        delay, attempt = 0.0, 1
        while True:
            self.stats[f"{kind} requests"] += 1
            if not window.admit(at + stream_delay + delay):
                self.stats[f"throttled ({shape.throttled})"] += 1
                error = shape.throttled
            elif shape.fault_rate and self.rng.random() < shape.fault_rate:
                self.stats["injected faults (500)"] += 1
                error = "500 InternalError"
            else:
                return delay
            if attempt >= retry.attempts or (retry.deadline_s is not None and delay >= retry.deadline_s):
                self.stats["calls failed after the SDK's retries"] += 1
                raise StoreError(f"{error} after {attempt} attempts ({retry.sdk})")
            self.stats["retries"] += 1
            delay += retry.backoff(attempt, self.rng) + shape.latency_s
            attempt += 1


class NodeStore(ObjectStore):
    """The `ObjectStore` node `node`'s agent gets: the bucket, through the node's own links."""

    part_size = 64 * MiB  # TRAINFLEET_PART_SIZE's default

    def __init__(self, bucket: Bucket, node: int, on_download=None):
        self.bucket, self.node = bucket, node
        self.concurrency = bucket.shape.concurrency  # TRAINFLEET_UPLOAD_CONCURRENCY: files (and parts) at once
        self.up, self.down = Link(bucket.shape.upload_bps), Link(bucket.shape.download_bps)
        self.on_download = on_download  # called after each download (disk accounting)

    # ---------------------------------------------------------------------------------- the interface

    def put_bytes(self, key: str, data: bytes) -> None:
        self._requests("write", 1, 1)
        self.bucket.put(key, StoredObject(len(data), None, None, bytes(data), self._now(), self.node))

    def put_file(self, key: str, path: str) -> str:
        size = os.path.getsize(path)
        identity = self.bucket.contents.identity(path)
        if identity is None:
            raise RuntimeError(f"{path}: not a file of the simulation")
        shape = self.bucket.shape
        whole = not shape.writes_per_part  # GCS counts an object write, not each chunk
        if whole:
            self._requests("write", 1, 1)
        self._move(size, up=True, streams=shape.upload_streams, unit=self.part_size, counted=not whole)
        if size > self.part_size:
            self._requests("write", 1, 1)  # CompleteMultipartUpload / Put Block List / the last chunk
        if shape.cloud == "aws":
            self._requests("read", 1, 1)  # HeadObject: the whole-object CRC64NVME
        token = self.bucket.contents.token(identity)
        self.bucket.put(key, StoredObject(size, identity, token, None, self._now(), self.node))
        return token

    def get_bytes(self, key: str) -> bytes | None:
        self._requests("read", 1, 1)
        obj = self.bucket.objects.get(key)
        if obj is None:
            return None
        return obj.data if obj.data is not None else b""

    def download(self, key: str, path: str, checksum: str) -> bool:
        """Stream the object to a sparse file of its size that holds its identity; True if its token is the one
        asked for (the real stores compare the checksum they computed while writing)."""
        shape = self.bucket.shape
        self._requests("read", 1, 1)  # HeadObject / the first GET
        obj = self.bucket.objects.get(key)
        if obj is None:
            return False
        with open(path, "wb") as f:  # the whole size at once: the disk accounting sees the file at its end size
            f.truncate(obj.size)
        if obj.identity is not None:
            self.bucket.contents.register(path, obj.identity)
        if shape.download_request_bytes is not None:
            self._move(obj.size, up=False, streams=shape.download_streams, unit=shape.download_request_bytes)
        elif shape.download_streams > 1:
            self._move(obj.size, up=False, streams=shape.download_streams, unit=self.part_size)
        else:
            self._move(obj.size, up=False, streams=1, unit=obj.size or 1, counted=False, latency=False)  # one GET
        self.bucket.fetched[self.node] += obj.size
        self.bucket.downloads.append((self.node, key, obj.size))
        if self.on_download is not None:
            self.on_download(self.node, obj.size)
        return obj.token == checksum

    def list(self, prefix: str) -> dict[str, int]:
        out = {k: o.size for k, o in self.bucket.objects.items() if k.startswith(prefix)}
        self._requests("read", max(1, math.ceil(len(out) / LIST_PAGE)), 1)  # pages, one after the other
        return dict(sorted(out.items()))

    def delete(self, key: str) -> None:
        self._requests("write", 1, 1)
        self.bucket.objects.pop(key, None)

    # ---------------------------------------------------------------------------------- the model

    def _now(self) -> float:
        return self.bucket.clock.now

    def _requests(self, kind: str, count: int, streams: int) -> None:
        """`count` small requests on `streams` connections: latency each, plus retries."""
        shape = self.bucket.shape
        per_stream = math.ceil(count / streams)
        delays = [0.0] * streams
        for i in range(count):
            s = i % streams
            at = self._now() + (i // streams) * shape.latency_s
            delays[s] += self.bucket.request(kind, at, delays[s])
        self.bucket.clock.sleep(per_stream * shape.latency_s + max(delays))

    def _move(self, size: int, up: bool, streams: int, unit: int, counted: bool = True, latency: bool = True) -> None:
        """Move `size` bytes in requests of `unit` bytes, up to `streams` connections at once, a segment at a time:
        the latency of the segment's requests (one connection's, one after another), its bytes as one fluid flow
        (see Network), then, when `counted`, its requests against the request limit at the times they were
        spread over, and the retries of those turned away (the SDK's backoff). `latency` False: one streamed GET,
        whose one latency the caller paid."""
        bucket, shape = self.bucket, self.bucket.shape
        node_link, account = (self.up, bucket.ingress) if up else (self.down, bucket.egress)
        kind = "write" if up else "read"
        moved = 0
        while True:
            seg = min(size - moved, SEGMENT_BYTES)
            s = max(1, min(streams, math.ceil(seg / self.part_size)))
            cap = s * shape.connection_bps if shape.connection_bps else math.inf
            n_req = max(1, math.ceil(seg / unit))
            per_stream = math.ceil(n_req / s)
            wait = shape.latency_s if latency else 0.0
            if per_stream * wait > 0:
                bucket.clock.sleep(per_stream * wait)
            began = self._now()
            if seg > 0:
                bucket.network.transfer(seg, node_link, account if account.capacity else None, s, cap)
            if counted:  # each request when its part starts, over the time the bytes took; the retries after
                spacing = (self._now() - began) / per_stream
                delays = [0.0] * s
                for i in range(n_req):
                    # The first requests go out together (every node starts its upload at the save's barrier);
                    # later ones drift apart, as real connections do: a deterministic jitter of up to a part.
                    drift = bucket.rng.uniform(-0.5, 0.5) * spacing if i >= s else 0.0
                    delays[i % s] += bucket.request(kind, began + (i // s) * spacing + drift, delays[i % s])
                if max(delays) > 0:
                    bucket.clock.sleep(max(delays))
            moved += seg
            if moved >= size:
                return
