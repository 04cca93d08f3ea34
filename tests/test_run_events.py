"""Run events (templates/agent/PROTOCOL.md section 7): the agent's `event` command writes one object per event to
the checkpoint bucket and `trainfleet events` lists them, both run as a user and a node run them (processes),
against moto's S3 server, gcp-storage-emulator and Azurite.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import uuid
from pathlib import Path
from unittest import mock

import pytest

from tests.agent_support import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    agent,
    load_agent_module,
    run_agent,
)
from tests.conftest import STACKS, assert_one_line_error, run_trainfleet

events_module = load_agent_module("events")
KEY_NAME = re.compile(r"^\d{8}T\d{6}\.\d{6}Z-")
GCS_BUCKET = "ckpt-events"  # prefixes are unique per test


class Bucket:
    """One cloud's bucket on its stand-in: the environment a node's agent and a user's CLI get, and a raw store."""

    def __init__(self, cloud: str, request):
        self.cloud = cloud
        self.prefix = f"stack/job/fleet-{uuid.uuid4().hex[:6]}"
        if cloud == "aws":
            url = request.getfixturevalue("moto").url
            self.name = "ckpt-" + uuid.uuid4().hex[:12]
            self.env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                        "AWS_ENDPOINT_URL": url}  # fmt: skip
            self.unset: tuple[str, ...] = ("AWS_SESSION_TOKEN", "AWS_PROFILE")
        elif cloud == "gcp":
            gcs = request.getfixturevalue("gcs")
            self.name = gcs.bucket(GCS_BUCKET)
            self.env = {"STORAGE_EMULATOR_HOST": gcs.url}
            self.unset = ("TRAINFLEET_GCS_ENDPOINT",)
        else:
            endpoint = request.getfixturevalue("azurite").endpoint
            self.name = f"{AZURITE_ACCOUNT}/ckpt-{uuid.uuid4().hex[:12]}"
            self.env = {"TRAINFLEET_AZURE_BLOB_ENDPOINT": endpoint, "AZURE_STORAGE_KEY": AZURITE_KEY}
            self.unset = ()
        if cloud == "aws":
            self.store().client.create_bucket(Bucket=self.name)
        elif cloud == "azure":
            self.store().container.create_container()

    def store(self):
        """The agent's own store for this bucket (setting up, reading back, writing what no agent would)."""
        env = {k: v for k, v in os.environ.items() if k not in self.unset}
        with mock.patch.dict(os.environ, {**env, **self.env}, clear=True):
            return load_agent_module("stores").make_store(self.cloud, self.name)

    def event(self, node: str, kind: str, *fields: str, prefix: str | None = None):
        argv = ["event", "--cloud", self.cloud, "--bucket", self.name, "--prefix", prefix or self.prefix,
                "--node", node, "--event", kind]  # fmt: skip
        for f in fields:
            argv += ["--field", f]
        return run_agent(*argv, env=self.env, unset=self.unset)

    def trainfleet(self, *args: str, cwd: Path | None = None):
        env = {k: v for k, v in os.environ.items() if k not in self.unset}
        with mock.patch.dict(os.environ, env, clear=True):
            kw = {"cwd": cwd} if cwd else {}
            return run_trainfleet("events", *args, env=self.env, **kw)

    def listed(self, *extra: str):
        return self.trainfleet("--cloud", self.cloud, "--bucket", self.name, "--prefix", self.prefix, *extra)


@pytest.fixture(params=["aws", "gcp", "azure"])
def bucket(request):
    return Bucket(request.param, request)


@pytest.fixture
def s3(request):
    return Bucket("aws", request)


# ------------------------------------------------------------------------------------------- the round trip


def test_events_the_agent_writes_are_listed_in_time_order_with_their_fields(bucket):
    written = [
        ("node-a", "membership", ["nodes=3", "members=10.0.0.4,10.0.1.7,10.0.2.9", "reason=scale out"]),
        ("node-b", "conversion_start", ["step=1200", "from_nodes=2", "to_nodes=3"]),
        (
            "node-b",
            "conversion_done",
            ["step=1200", "from_nodes=2", "to_nodes=3", "bytes=1048576", "seconds=2.5"],
        ),
        ("node-a", "resume", ["step=1200", "nodes=3", "grad_accum=8", "exact=true", "note=null"]),
    ]
    keys = []
    for node, kind, fields in written:
        res = bucket.event(node, kind, *fields)
        assert res.returncode == 0, res.stderr
        key = res.stdout.strip()
        assert key.startswith(f"{bucket.prefix}/events/") and key.endswith(f"-{node}-{kind}.json")
        assert KEY_NAME.match(key.rsplit("/", 1)[1])
        logged = [json.loads(line) for line in res.stderr.splitlines() if line.startswith("{")]
        # the node's journal has it too
        assert any(e["event"] == kind and e["node"] == node for e in logged), res.stderr
        keys.append(key)
    assert keys == sorted(keys)  # names sort by time
    stored = bucket.store().list(f"{bucket.prefix}/events/")
    assert sorted(stored) == keys

    res = bucket.listed("--json")
    assert res.code == 0, res.stderr
    listed = res.json()
    assert [(e["node"], e["event"]) for e in listed] == [(n, k) for n, k, _ in written]
    assert [e["ts"] for e in listed] == sorted(e["ts"] for e in listed)
    assert listed[0]["members"] == "10.0.0.4,10.0.1.7,10.0.2.9" and listed[0]["reason"] == "scale out"
    assert listed[2] | {"ts": 0, "time": ""} == {"ts": 0, "time": "", "node": "node-b", "event": "conversion_done",
                                                 "step": 1200, "from_nodes": 2, "to_nodes": 3, "bytes": 1048576,
                                                 "seconds": 2.5}  # fmt: skip
    assert listed[3]["exact"] is True and listed[3]["note"] is None and listed[3]["grad_accum"] == 8
    assert all(e["time"].endswith("Z") for e in listed)

    table = bucket.listed()
    assert table.code == 0, table.stderr
    rows = [line for line in table.stdout.splitlines() if "node-" in line]
    assert [r.split()[3] for r in rows] == [k for _, k, _ in written]  # date, time, node, event, details
    assert "from_nodes=2" in rows[1] and "seconds=2.5" in rows[2]


def test_concurrent_writers_each_get_their_own_object(s3):
    base = ["event", "--cloud", "aws", "--bucket", s3.name, "--prefix", s3.prefix, "--event", "membership"]
    procs = [
        agent(*base, "--node", f"n{i}", "--field", f"rank={i}", env=s3.env, unset=s3.unset) for i in range(8)
    ]
    assert all(p.wait(60) == 0 for p in procs)
    res = s3.listed("--json")
    assert res.code == 0, res.stderr
    assert sorted(e["rank"] for e in res.json()) == list(range(8))


def test_limit_shows_the_newest_events_in_time_order(s3):
    for step in range(5):
        assert s3.event("n0", "resume", f"step={step}").returncode == 0
    res = s3.listed("--json", "--limit", "2")
    assert res.code == 0, res.stderr
    assert [e["step"] for e in res.json()] == [3, 4]
    table = s3.listed("--limit", "2")
    assert table.code == 0 and "5 event objects in all" in " ".join(table.stdout.split())


def test_no_events_is_an_empty_list(s3):
    res = s3.listed("--json")
    assert res.code == 0 and res.json() == []
    table = s3.listed()
    assert table.code == 0 and "no events under" in table.stdout


# ------------------------------------------------------------------------------------------- the stack's bucket


def _project(tmp_path: Path, bucket_name: str | None) -> Path:
    (tmp_path / "Pulumi.yaml").write_text(
        "name: trainfleet\nruntime: python\nmain: infra/\nstackConfigDir: stacks\n"
    )
    (tmp_path / "stacks").mkdir()
    text = (STACKS / "Pulumi.dev.yaml").read_text()
    if bucket_name:
        text = text.replace(
            "  trainfleet:checkpoint:\n", f"  trainfleet:checkpoint:\n    bucket_name: {bucket_name}\n"
        )
    (tmp_path / "stacks" / "Pulumi.ev.yaml").write_text(text)
    return tmp_path


def _node_env(project: Path) -> dict[str, str]:
    """TRAINFLEET_* as the stack's node gets them: its rendered trainfleet.env."""
    from infra.stack_file import read_stack_file
    from infra.userdata import render_fleets

    sf = read_stack_file(project / "stacks" / "Pulumi.ev.yaml")
    (rendered,) = render_fleets(sf.env, sf.config).values()
    out = {}
    for line in rendered.parts["trainfleet.env"].splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[name] = shlex.split(value)[0] if value else ""
    return out


def test_the_stack_finds_the_bucket_and_prefix_its_nodes_write_to(s3, tmp_path):
    project = _project(tmp_path, s3.name)
    node = _node_env(project)
    assert node["TRAINFLEET_BUCKET"] == s3.name
    # the boot script's call: the bucket and prefix from the node's environment
    res = run_agent("event", "--cloud", node["TRAINFLEET_CLOUD"], "--bucket", node["TRAINFLEET_BUCKET"],
                    "--prefix", node["TRAINFLEET_PREFIX"], "--node", "ip-10-0-0-4", "--event", "membership",
                    "--field", "nodes=2", env=s3.env, unset=s3.unset)  # fmt: skip
    assert res.returncode == 0, res.stderr
    listed = s3.trainfleet("--stack", "ev", "--json", cwd=project)
    assert listed.code == 0, listed.stderr
    assert [(e["node"], e["event"], e["nodes"]) for e in listed.json()] == [("ip-10-0-0-4", "membership", 2)]
    # --fleet names the stack's one fleet; --bucket overrides the stack's
    again = s3.trainfleet("--stack", "ev", "--fleet", "dev", "--bucket", s3.name, "--json", cwd=project)
    assert again.code == 0 and again.json() == listed.json()


def test_a_bucket_named_by_pulumi_up_must_be_given(s3, tmp_path):
    project = _project(tmp_path, None)
    assert_one_line_error(s3.trainfleet("--stack", "ev", cwd=project), "fleet dev", "--bucket")


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--stack", "nope"], ["Pulumi.nope.yaml", "does not exist"]),
        (
            ["--stack", "dev", "--fleet", "dve", "--bucket", "x-bucket"],
            ["no fleet 'dve'", "did you mean dev"],
        ),
        (["--stack", "dev", "--cloud", "gcp", "--bucket", "x-bucket"], ["--cloud gcp", "on aws"]),
        (["--cloud", "aws"], ["--stack", "--bucket"]),
        (["--cloud", "awz", "--bucket", "b"], ["not a cloud", "aws"]),
        (["--cloud", "azure", "--bucket", "account-only"], ["STORAGEACCOUNT/CONTAINER"]),
        (["--cloud", "aws", "--bucket", "x-bucket", "--limit", "-1"], ["--limit"]),
    ],
)
def test_bad_input_is_one_line(s3, args, needles):
    assert_one_line_error(s3.trainfleet(*args), *needles)


# ------------------------------------------------------------------------------------------- refusals and failures


@pytest.mark.parametrize(
    "option, value",
    [
        ("--node", "../../etc"),
        ("--node", "a/b"),
        ("--node", ""),
        ("--node", ".hidden"),
        ("--node", "x" * 65),
        ("--event", "$(id)"),
        ("--event", "resume\nfake"),
        ("--event", "-rf"),
        ("--field", "ts=1"),
        ("--field", "a/b=1"),
        ("--field", "novalue"),
        ("--field", "note=" + "x" * 2000),
    ],
)
def test_hostile_names_are_refused_and_nothing_is_written(s3, option, value):
    names = {"--node": "n0", "--event": "resume", option: value}
    argv = ["event", "--cloud", "aws", "--bucket", s3.name, "--prefix", s3.prefix]
    # one word each: a value starting with '-' stays a value
    argv += [f"{name}={text}" for name, text in names.items()]
    res = run_agent(*argv, env=s3.env, unset=s3.unset)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and "error: argument " + option in res.stderr
    assert s3.store().list("") == {}


def test_a_field_given_twice_is_refused(s3):
    res = s3.event("n0", "resume", "step=1", "step=2")
    assert res.returncode == 2 and "--field step given twice" in res.stderr
    assert s3.store().list("") == {}


def test_a_store_error_is_exit_1_with_one_line(s3):
    res = run_agent("event", "--cloud", "aws", "--bucket", "no-such-bucket-" + uuid.uuid4().hex[:8], "--prefix",
                    "p", "--node", "n0", "--event", "resume", env=s3.env, unset=s3.unset)  # fmt: skip
    assert res.returncode == 1
    plain = [line for line in res.stderr.splitlines() if not line.startswith("{")]
    assert len(plain) == 1 and plain[0].startswith("trainfleet_agent event: ") and "NoSuchBucket" in plain[0]
    assert "Traceback" not in res.stderr


def test_corrupt_objects_are_skipped_with_a_warning(bucket):
    assert bucket.event("n0", "membership", "nodes=2").returncode == 0
    assert bucket.event("n1", "resume", "step=7").returncode == 0
    store = bucket.store()
    base = f"{bucket.prefix}/events/"
    store.put_bytes(base + "20300101T000000.000000Z-n2-resume.json", b"{not json")
    store.put_bytes(base + "20300101T000001.000000Z-n2-resume.json", b"[1, 2]")
    body = {"ts": 1.0, "time": "x", "node": "other", "event": "resume"}
    store.put_bytes(base + "20300101T000002.000000Z-n2-resume.json", json.dumps(body).encode())
    store.put_bytes(base + "20300101T000003.000000Z-n2-resume.json", b"\xff\xfe")
    store.put_bytes(base + "notes.json", b"{}")
    res = bucket.listed("--json")
    assert res.code == 0, res.stderr
    assert [(e["node"], e["event"]) for e in res.json()] == [("n0", "membership"), ("n1", "resume")]
    warning = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(warning) == 1 and warning[0].startswith("warning: skipped 5 object(s)"), res.stderr
    assert "Traceback" not in res.stderr


def test_a_bucket_that_does_not_exist_is_one_line(bucket):
    missing = {"aws": "no-such-" + uuid.uuid4().hex[:8], "gcp": "no-such-" + uuid.uuid4().hex[:8],
               "azure": f"{AZURITE_ACCOUNT}/no-such-{uuid.uuid4().hex[:8]}"}[bucket.cloud]  # fmt: skip
    res = bucket.trainfleet("--cloud", bucket.cloud, "--bucket", missing, "--prefix", "p")
    assert_one_line_error(res, "does not exist", "--bucket")


def test_no_aws_credentials_is_one_line(s3, tmp_path):
    env = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_ENDPOINT_URL": s3.env["AWS_ENDPOINT_URL"],
           "AWS_REGION": "us-east-1"}  # fmt: skip
    strip = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
    with mock.patch.dict(os.environ, {k: v for k, v in os.environ.items() if k not in strip}, clear=True):
        res = run_trainfleet("events", "--cloud", "aws", "--bucket", s3.name, env=env)
    assert_one_line_error(res, "no AWS credentials", "AWS_PROFILE")


# ------------------------------------------------------------------------------------------- the rules themselves


@pytest.mark.parametrize(
    "text, value",
    [("3", 3), ("-2", -2), ("2.5", 2.5), ("1e3", 1000.0), ("true", True), ("false", False), ("null", None),
     ("10.0.0.4,10.0.1.7", "10.0.0.4,10.0.1.7"), ("1e400", "1e400"), ("nan", "nan"), ("True", "True"),
     ("", ""), ("scale in", "scale in")],
)  # fmt: skip
def test_field_values_are_read_as_json_scalars(text, value):
    parsed = events_module.parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_keys_stay_under_the_prefix_and_sort_by_time():
    early = events_module.event_key("a/b/", 1_700_000_000.5, "node-1", "resume")
    late = events_module.event_key("a/b", 1_700_000_000.500001, "node-0", "membership")
    assert early == "a/b/events/20231114T221320.500000Z-node-1-resume.json"
    assert early < late
    assert events_module.event_key("", 0, "n", "e") == "events/19700101T000000.000000Z-n-e.json"
    with pytest.raises(ValueError, match="not a plain name"):
        events_module.event_key("p", 0, "..", "e")
