"""The agent's token data step (`trainfleet_agent.pyz data`, templates/agent/trainfleet_agent/data.py), on moto's S3
through the agent's own S3 store, as a node's boot script runs it before each launch.

The dataset is the one `trainfleet data tokenize` writes (tests/token_data.py builds it with the same writer);
what lands on the node must be byte for byte what was uploaded, verified against index.json's sha256, and anything
the index does not vouch for must never be left where the trainer reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid

import pytest

from tests.agent_support import load_agent_module, run_agent
from tests.token_data import tiny_dataset, upload_dataset

data = load_agent_module("data")
stores = load_agent_module("stores")


@pytest.fixture
def bucket(moto, monkeypatch):
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL_S3": moto.url}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    name = "data-" + uuid.uuid4().hex[:10]
    moto.client("s3").create_bucket(Bucket=name)
    return name


def uploaded(moto, bucket: str) -> str:
    prefix = "team/job/data"
    upload_dataset(moto.client("s3"), bucket, prefix)
    return prefix


def same_files(a, b) -> bool:
    names = sorted(p.name for p in a.iterdir() if not p.name.startswith("."))
    return names == sorted(p.name for p in b.iterdir() if not p.name.startswith(".")) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def test_the_dataset_arrives_byte_for_byte_and_a_relaunch_copies_nothing(moto, bucket, tmp_path):
    prefix = uploaded(moto, bucket)
    store = stores.S3Store(bucket)
    got = data.sync_data(store, prefix, str(tmp_path / "data"))
    index = json.loads((tiny_dataset() / "index.json").read_text())
    assert got["shards"] == got["fetched"] == len(index["shards"]) == 3
    assert got["bytes"] == got["bytes_fetched"] == 2 * index["total_tokens"]  # uint16
    assert same_files(tiny_dataset(), tmp_path / "data")
    again = data.sync_data(store, prefix, str(tmp_path / "data"))
    assert again["fetched"] == 0 and again["bytes_fetched"] == 0


def test_a_dataset_uploaded_again_under_the_same_names_is_fetched_anew(moto, bucket, tmp_path):
    """Same shard names and sizes, new bytes: the index's sha256 changed, so the node's copy is stale."""
    prefix = uploaded(moto, bucket)
    store = stores.S3Store(bucket)
    data.sync_data(store, prefix, str(tmp_path / "data"))
    s3 = moto.client("s3")
    index = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/index.json")["Body"].read())
    first = index["shards"][0]
    body = bytearray(s3.get_object(Bucket=bucket, Key=f"{prefix}/{first['name']}")["Body"].read())
    body[0:2] = (ord("Z")).to_bytes(2, "little")
    first["sha256"] = hashlib.sha256(body).hexdigest()
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{first['name']}", Body=bytes(body))
    s3.put_object(Bucket=bucket, Key=f"{prefix}/index.json", Body=json.dumps(index).encode())
    got = data.sync_data(store, prefix, str(tmp_path / "data"))
    assert got["fetched"] == 1
    assert (tmp_path / "data" / first["name"]).read_bytes() == bytes(body)


def test_a_shard_that_does_not_match_its_index_is_refused_and_left_nowhere(moto, bucket, tmp_path):
    prefix = uploaded(moto, bucket)
    s3 = moto.client("s3")
    index = json.loads((tiny_dataset() / "index.json").read_text())
    name = index["shards"][1]["name"]
    body = bytearray((tiny_dataset() / name).read_bytes())
    body[100] ^= 0x01  # one bit flipped at rest
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=bytes(body))
    with pytest.raises(data.DataProblem, match=f"shard {name} .* sha256"):
        data.sync_data(stores.S3Store(bucket), prefix, str(tmp_path / "data"))
    left = sorted(os.listdir(tmp_path / "data"))
    assert name not in left and not any(n.endswith(".partial") for n in left) and "index.json" not in left


@pytest.mark.parametrize("name", ["../escape.bin", "index.json", ".hidden", "a/b.bin", ""])
def test_an_index_naming_a_path_outside_the_data_folder_is_refused(moto, bucket, tmp_path, name):
    prefix = uploaded(moto, bucket)
    index = json.loads((tiny_dataset() / "index.json").read_text())
    index["shards"][0]["name"] = name
    moto.client("s3").put_object(Bucket=bucket, Key=f"{prefix}/index.json", Body=json.dumps(index).encode())
    with pytest.raises(data.DataProblem, match="plain file names"):
        data.sync_data(stores.S3Store(bucket), prefix, str(tmp_path / "data"))
    assert not (tmp_path / "escape.bin").exists()


def test_no_index_in_the_bucket_is_nothing_to_copy(bucket, tmp_path):
    assert data.sync_data(stores.S3Store(bucket), "team/job/data", str(tmp_path / "data")) is None


def test_the_command_prints_what_it_copied_or_one_line_and_exit_2(moto, bucket, tmp_path):
    prefix = uploaded(moto, bucket)
    args = ["data", "--cloud", "aws", "--bucket", bucket, "--prefix", prefix, "--dest", str(tmp_path / "d")]
    env = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL_S3")}
    ok = run_agent(*args, env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["shards"] == 3
    moto.client("s3").put_object(Bucket=bucket, Key=f"{prefix}/index.json", Body=b"{not json")
    bad = run_agent(*args, env=env)
    problem = [line for line in bad.stderr.splitlines() if line.startswith("trainfleet_agent data:")]
    assert bad.returncode == 2 and len(problem) == 1 and "is not JSON" in problem[0], bad.stderr
