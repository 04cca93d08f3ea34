"""The agent's checkpoint commit, prune and restore against a real S3 API: the agent's own S3Store talking to
moto's S3 server on 127.0.0.1, with boto3 as an independent client that reads (and damages) the bucket.

tests/test_agent_commit_restore.py checks the same rules against an in-memory stand-in; these check them
where the agent really runs them, over S3's semantics (GetObject of a missing key is 404 NoSuchKey,
ListObjectsV2 gives every key with its Size, DeleteObject of a missing key is 204), so a rule that only held
because of the stand-in would fail here. Every expected value comes from templates/agent/PROTOCOL.md
("Bucket layout", "Checkpoints on the node") and from the bytes each test writes, never from the agent.

A "kill" is a store that raises just before one chosen call, as kill -9 of the agent at that moment would
leave the bucket: the bucket is then read with boto3, not with the agent.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest

from tests.agent_support import load_agent_module

agent = load_agent_module()
PREFIX = "runs/llama"


class AgentKilled(Exception):
    """Stands for kill -9 of the agent just before one object-store call."""


@pytest.fixture
def s3(moto):
    """An independent S3 client: what another node, or an operator with the aws CLI, sees in the bucket."""
    return moto.client("s3")


@pytest.fixture
def bucket(s3):
    name = "ckpt-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def aws_env(moto, monkeypatch):
    # PROTOCOL.md "Object stores": env keys for SigV4, AWS_ENDPOINT_URL_S3 for a path-style test endpoint.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto.url)


@pytest.fixture
def store(aws_env, bucket):
    return agent.S3Store(bucket)


def killed_store(bucket: str, before: str, key_suffix: str):
    """The agent's S3Store, killed just before its first `before` call ("put" or "delete") on a key ending
    in `key_suffix`."""

    class KilledAt(agent.S3Store):
        def _maybe_die(self, op, key):
            if op == before and key.endswith(key_suffix):
                raise AgentKilled(f"{op} {key}")

        def put_bytes(self, key, data):
            self._maybe_die("put", key)
            super().put_bytes(key, data)

        def put_file(self, key, path):
            self._maybe_die("put", key)
            return super().put_file(key, path)

        def delete(self, key):
            self._maybe_die("delete", key)
            super().delete(key)

    return KilledAt(bucket)


# ---- reading the bucket with boto3 --------------------------------------------------------------------


def key(step: int, name: str, node: int = 0) -> str:
    """Where a file of `step` lives in the bucket (PROTOCOL.md section 3): MANIFEST.json at the step, every
    other file under the part of the node that saved it."""
    if name == "MANIFEST.json":
        return f"{PREFIX}/step-{step:08d}/{name}"
    return f"{PREFIX}/step-{step:08d}/node-{node}/{name}"


SHARD = "global_step/mp_rank_00_model_states.pt"


def shard_bytes(step: int) -> bytes:
    return f"model {step}".encode() * 50


def read_object(s3, bucket: str, k: str) -> bytes | None:
    try:
        return s3.get_object(Bucket=bucket, Key=k)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


def put_object(s3, bucket: str, k: str, data: bytes) -> None:
    s3.put_object(Bucket=bucket, Key=k, Body=data)


def keys_in(s3, bucket: str) -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=PREFIX + "/")
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def steps_in(s3, bucket: str) -> set[int]:
    """Steps with any object left in the bucket."""
    return {int(k.split("/")[2][len("step-") :]) for k in keys_in(s3, bucket) if "/step-" in k}


# ---- the trainer's side: step directories on the node ---------------------------------------------------


def write_step(ckpt: Path, step: int, complete: bool = True) -> Path:
    """PROTOCOL.md section 1: step-<N:08d>/ with the shards (DeepSpeed's global_step subdir), COMPLETE last."""
    d = ckpt / f"step-{step:08d}"
    (d / "global_step").mkdir(parents=True, exist_ok=True)
    (d / SHARD).write_bytes(shard_bytes(step))
    (d / "global_step" / "optim_states.pt").write_bytes(f"optim {step}".encode() * 80)
    if complete:
        (d / "COMPLETE").write_text("")
    return d


def commit(store, tmp_path: Path, *steps: int, keep_last: int = 0) -> None:
    """The trainer finishes each step in turn and the agent uploads it."""
    for step in steps:
        write_step(tmp_path / "ckpt", step)
        agent.upload_step(store, PREFIX, str(tmp_path / "ckpt"), step, keep_last=keep_last)


def restore_into(store, tmp_path: Path) -> tuple[int | None, Path]:
    dest = tmp_path / "node"
    dest.mkdir(exist_ok=True)
    return agent.restore(store, PREFIX, str(dest)), dest


# ---- steps on the node ----------------------------------------------------------------------------------


def test_only_complete_steps_count_oldest_first(tmp_path):
    """Written 30, 10, 20 (listing order is the filesystem's), plus 40 still being written (no COMPLETE)."""
    ckpt = tmp_path / "ckpt"
    for step in (30, 10, 20):
        write_step(ckpt, step)
    write_step(ckpt, 40, complete=False)
    (ckpt / "latest").write_text("global_step40")  # DeepSpeed's tag file is not a step directory
    assert agent.complete_steps(str(ckpt)) == [10, 20, 30]


# ---- commit: files, then MANIFEST.json, then LATEST -------------------------------------------------------


def test_a_commit_leaves_the_protocols_layout_in_s3(store, s3, bucket, tmp_path):
    commit(store, tmp_path, 7)
    # PROTOCOL.md section 3: LATEST is the text "step-<N:08d>".
    assert read_object(s3, bucket, f"{PREFIX}/LATEST") == b"step-00000007"
    assert keys_in(s3, bucket) == {
        f"{PREFIX}/LATEST",
        key(7, "PART.json"),
        key(7, SHARD),
        key(7, "global_step/optim_states.pt"),
        key(7, "MANIFEST.json"),
    }
    manifest = json.loads(read_object(s3, bucket, key(7, "MANIFEST.json")))
    shard = shard_bytes(7)
    shard_entry = {"path": SHARD, "size": len(shard), "checksum": crc64nvme_token(shard)}
    assert manifest["step"] == 7 and manifest["nodes"] == 1
    assert shard_entry in [{k: v for k, v in e.items() if k != "mtime_ns"} for e in manifest["parts"][0]["files"]]


def test_latest_only_moves_forward(store, s3, bucket, tmp_path):
    """A periodic upload of step 10 finishing after the notice checkpoint of step 20 was committed."""
    commit(store, tmp_path, 20, 10)
    assert read_object(s3, bucket, f"{PREFIX}/LATEST") == b"step-00000020"
    assert read_object(s3, bucket, key(10, "MANIFEST.json")) is not None  # step 10 is durable all the same


def test_an_agent_killed_before_the_manifest_leaves_latest_where_it_was(aws_env, s3, bucket, tmp_path):
    """PROTOCOL.md: "Kill -9 of the agent or the VM mid-upload leaves LATEST on the previous step"."""
    commit(agent.S3Store(bucket), tmp_path, 1)
    write_step(tmp_path / "ckpt", 2)
    with pytest.raises(AgentKilled):
        agent.upload_step(killed_store(bucket, "put", "MANIFEST.json"), PREFIX, str(tmp_path / "ckpt"), 2)
    assert read_object(s3, bucket, f"{PREFIX}/LATEST") == b"step-00000001"
    assert read_object(s3, bucket, key(2, SHARD)) == shard_bytes(2)  # the files were up, the commit was not


@pytest.mark.parametrize(
    "text",
    [
        b"step-00000001\n",  # `echo step-00000001 | aws s3 cp - s3://B/P/LATEST`
        b"step-00000001\r\n",  # the same from Windows cmd: `echo step-00000001> LATEST` ends lines in CRLF
        b" step-00000001 ",  # pasted with spaces around it
    ],
)
def test_latest_rolled_back_by_an_operator_is_followed(store, s3, bucket, tmp_path, text):
    """An operator rolls the run back to step 1 by rewriting LATEST by hand: restore must take step 1."""
    commit(store, tmp_path, 1, 2)
    put_object(s3, bucket, f"{PREFIX}/LATEST", text)
    assert agent.read_latest(store, PREFIX) == 1
    step, dest = restore_into(store, tmp_path)
    assert step == 1 and (dest / "step-00000001" / SHARD).read_bytes() == shard_bytes(1)


# Windows PowerShell 5.1's `echo step-00000001 > LATEST` writes UTF-16LE with a BOM ("Out-File and the
# redirection operators > and >> create UTF-16LE", learn.microsoft.com/powershell/module/
# microsoft.powershell.core/about/about_character_encoding?view=powershell-5.1): not UTF-8 at all.
UNREADABLE_LATEST = "step-00000001\r\n".encode("utf-16")


def test_an_unreadable_latest_falls_back_to_the_newest_verified_step(store, s3, bucket, tmp_path):
    """PROTOCOL.md: "If anything fails it falls back to the newest step whose manifest verifies"."""
    commit(store, tmp_path, 1, 2)
    put_object(s3, bucket, f"{PREFIX}/LATEST", UNREADABLE_LATEST)
    assert agent.read_latest(store, PREFIX) is None
    step, dest = restore_into(store, tmp_path)
    assert step == 2 and (dest / "step-00000002" / SHARD).read_bytes() == shard_bytes(2)


def test_an_unreadable_latest_is_replaced_by_the_next_commit(store, s3, bucket, tmp_path):
    """The agent must keep committing checkpoints, not fail every upload after the files are up."""
    commit(store, tmp_path, 1)
    put_object(s3, bucket, f"{PREFIX}/LATEST", UNREADABLE_LATEST)
    commit(store, tmp_path, 2)
    assert read_object(s3, bucket, f"{PREFIX}/LATEST") == b"step-00000002"


def test_a_missing_latest_reads_as_none(store):
    assert agent.read_latest(store, PREFIX) is None  # S3 answers 404 NoSuchKey


# ---- prune ------------------------------------------------------------------------------------------------


def test_keep_last_keeps_the_newest_steps_and_deletes_the_rest(store, s3, bucket, tmp_path):
    commit(store, tmp_path, 1, 2, 3, 4, 5, keep_last=2)
    assert steps_in(s3, bucket) == {4, 5}


def test_prune_counts_only_steps_at_or_below_latest_and_spares_newer_uploads(store, s3, bucket, tmp_path):
    """LATEST=3; step 4 is committed but LATEST has not moved yet; step 5 is still uploading (no manifest).
    keep_last=2 keeps 3 and 2 (the newest two at or below LATEST) and never touches 4 or 5."""
    commit(store, tmp_path, 1, 2, 3, 4, 5)
    s3.delete_object(Bucket=bucket, Key=key(5, "MANIFEST.json"))
    assert agent.prune(store, PREFIX, keep_last=2, latest=3) == [1]
    assert steps_in(s3, bucket) == {2, 3, 4, 5}
    assert read_object(s3, bucket, key(5, SHARD)) == shard_bytes(5)


def test_prune_with_only_latests_unmanifested_step_deletes_nothing(store, s3, bucket, tmp_path):
    """LATEST's step lost its manifest and nothing older is in the bucket: there is nothing to prune, and the
    step LATEST names is never deleted."""
    commit(store, tmp_path, 3)
    s3.delete_object(Bucket=bucket, Key=key(3, "MANIFEST.json"))
    assert agent.prune(store, PREFIX, keep_last=1, latest=3) == []
    assert steps_in(s3, bucket) == {3}


def test_a_prune_killed_after_its_first_delete_has_removed_the_manifest(aws_env, s3, bucket, tmp_path):
    """PROTOCOL.md: "A pruned step loses its manifest first", so a half-pruned step never looks complete."""
    commit(agent.S3Store(bucket), tmp_path, 1, 2)
    step_1_files = {key(1, n) for n in ("PART.json", SHARD, "global_step/optim_states.pt")}

    class KilledAfterFirstDelete(agent.S3Store):
        def delete(self, k):
            super().delete(k)
            raise AgentKilled(k)

    with pytest.raises(AgentKilled):
        agent.prune(KilledAfterFirstDelete(bucket), PREFIX, keep_last=1, latest=2)
    left_of_step_1 = {k for k in keys_in(s3, bucket) if k.startswith(key(1, ""))}
    assert left_of_step_1 == step_1_files  # everything but MANIFEST.json


# ---- verify and restore ---------------------------------------------------------------------------------


def test_restore_takes_latest_and_writes_complete(store, tmp_path):
    commit(store, tmp_path, 1, 2)
    step, dest = restore_into(store, tmp_path)
    assert step == 2
    assert (dest / "step-00000002" / SHARD).read_bytes() == shard_bytes(2)
    assert (dest / "step-00000002" / "COMPLETE").is_file()


def test_without_latest_restore_takes_the_newest_step_in_the_bucket(store, s3, bucket, tmp_path):
    commit(store, tmp_path, 1, 3, 2)
    s3.delete_object(Bucket=bucket, Key=f"{PREFIX}/LATEST")
    assert restore_into(store, tmp_path)[0] == 3


def test_verify_rejects_an_object_shorter_than_the_manifest_says(store, s3, bucket, tmp_path):
    """An upload cut short: the listing's Size differs from the manifest's size."""
    commit(store, tmp_path, 2)
    assert agent.verify_manifest(store, PREFIX, 2)["step"] == 2
    put_object(s3, bucket, key(2, SHARD), shard_bytes(2)[:-1])
    assert agent.verify_manifest(store, PREFIX, 2) is None


def damage_step(s3, bucket: str, step: int, how: str) -> None:
    shard = shard_bytes(step)
    if how == "truncated shard":
        put_object(s3, bucket, key(step, SHARD), shard[:100])
    elif how == "same size, other bytes":
        put_object(s3, bucket, key(step, SHARD), b"x" * len(shard))
    elif how == "torn manifest":
        manifest = read_object(s3, bucket, key(step, "MANIFEST.json"))
        put_object(s3, bucket, key(step, "MANIFEST.json"), manifest[:40])
    elif how == "manifest missing":
        s3.delete_object(Bucket=bucket, Key=key(step, "MANIFEST.json"))
    else:
        raise AssertionError(how)


DAMAGE = ["truncated shard", "same size, other bytes", "torn manifest", "manifest missing"]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_latest_step_that_does_not_verify_falls_back_to_the_previous_one(store, s3, bucket, tmp_path, how):
    commit(store, tmp_path, 1, 2)
    damage_step(s3, bucket, 2, how)
    step, dest = restore_into(store, tmp_path)
    assert step == 1
    assert (dest / "step-00000001" / SHARD).read_bytes() == shard_bytes(1)
    assert sorted(p.name for p in dest.iterdir()) == ["step-00000001"]  # no step 2, no temp dir left


def test_a_half_restored_step_directory_is_restored_again(store, tmp_path):
    """A node killed mid-restore left step-2 without COMPLETE: the next restore must redo it, not trust it."""
    commit(store, tmp_path, 2)
    half = tmp_path / "node" / "step-00000002" / "global_step"
    half.mkdir(parents=True)
    (half / "mp_rank_00_model_states.pt").write_bytes(b"partial")
    step, dest = restore_into(store, tmp_path)
    assert step == 2
    assert (dest / "step-00000002" / SHARD).read_bytes() == shard_bytes(2)
    assert (dest / "step-00000002" / "COMPLETE").is_file()


def test_temp_dirs_left_by_killed_restores_are_removed(store, tmp_path):
    """Each killed restore leaves .restore-step-<N>-<pid>; a node restarting over and over must not fill its
    disk with them."""
    commit(store, tmp_path, 2)
    for pid in (4242, 4243):
        left = tmp_path / "node" / f".restore-step-00000002-{pid}" / "global_step"
        left.mkdir(parents=True)
        (left / "mp_rank_00_model_states.pt").write_bytes(b"partial")
    step, dest = restore_into(store, tmp_path)
    assert step == 2 and sorted(p.name for p in dest.iterdir()) == ["step-00000002"]


# ---- CompleteMultipartUpload can answer 200 with an error (issue 13 #8) ---------------------------------
# botocore turns such an answer into a retryable error (its handlers' `_handle_200_error`); these tests put a
# proxy that answers like that (tests/storage_auth_proxies.py S3CompleteAnswers200Error) between the agent's
# S3Store and moto, so what they check is the SDK's handling as the store uses it.


def crc64nvme_token(data: bytes) -> str:
    """The checksum token S3 reports for `data` (x-amz-checksum-crc64nvme), computed here with awscrt."""
    import base64

    from awscrt import checksums

    return "crc64nvme:" + base64.b64encode(checksums.crc64nvme(data).to_bytes(8, "big")).decode()


@pytest.fixture
def complete_answers_200_error(moto, aws_env, monkeypatch):
    """A factory: the agent's S3Store whose first `times` CompleteMultipartUpload calls are answered 200 with an
    <Error> body (not forwarded, so that upload is really not complete), and the proxy that counts them."""
    from tests.storage_auth_proxies import S3CompleteAnswers200Error

    proxies = []
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")  # the SDK's own setting: 3 attempts keep a lasting error quick

    def make(bucket: str, error_code: str, times: int):
        proxy = S3CompleteAnswers200Error(moto.url, error_code, times).start()
        proxies.append(proxy)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
        store = agent.S3Store(bucket)
        store.part_size = 5 * 1024 * 1024  # S3's smallest part
        return store, proxy

    yield make
    for proxy in proxies:
        proxy.stop()


def _big_file(tmp_path, seed: bytes = b"seed") -> tuple[Path, bytes]:
    data = hashlib.sha256(seed).digest() * (6 * 1024 * 1024 // 32 + 1)  # a little over 6 MiB: 2 parts
    path = tmp_path / ("shard-" + seed.decode() + ".pt")
    path.write_bytes(data)
    return path, data


def test_a_200_with_an_internal_error_is_retried_and_the_object_is_really_there(complete_answers_200_error, s3, bucket, tmp_path):
    store, proxy = complete_answers_200_error(bucket, "InternalError", times=1)
    path, data = _big_file(tmp_path)
    token = store.put_file("k/shard.pt", str(path))
    assert proxy.completions == 2  # the first answer was an error in a 200: completed again
    assert s3.get_object(Bucket=bucket, Key="k/shard.pt")["Body"].read() == data
    assert token == crc64nvme_token(data)  # the whole object's CRC64NVME, as S3 reports it


def test_a_200_with_a_lasting_error_fails_the_upload_never_durable(complete_answers_200_error, s3, bucket, tmp_path):
    from botocore.exceptions import ClientError

    store, proxy = complete_answers_200_error(bucket, "InvalidPart", times=99)
    path, _data = _big_file(tmp_path)
    with pytest.raises(ClientError, match=r"\(InvalidPart\) when calling the CompleteMultipartUpload operation"):
        store.put_file("k/shard.pt", str(path))
    assert proxy.completions == 3  # AWS_MAX_ATTEMPTS
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="k/")
    # the failed upload was aborted, not left to bill its parts
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_a_failed_reupload_never_passes_the_older_object_off_as_the_new_one(complete_answers_200_error, s3, bucket, tmp_path):
    """A step uploaded again (the agent restarted mid-upload) over an older object under the same key: if the
    completion fails, put_file must fail, not report the checksum of what was there before."""
    store, _proxy = complete_answers_200_error(bucket, "InternalError", times=99)
    _old_path, old = _big_file(tmp_path, b"old")
    put_object(s3, bucket, "k/shard.pt", old)
    new_path, _new = _big_file(tmp_path, b"new")
    with pytest.raises(Exception, match="CompleteMultipartUpload"):
        store.put_file("k/shard.pt", str(new_path))
    assert read_object(s3, bucket, "k/shard.pt") == old
