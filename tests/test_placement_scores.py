"""`trainfleet catalog refresh --cloud aws --placement-scores` against a local GetSpotPlacementScores stand-in,
and the typed loader (infra/catalog/capacity.py) that the planner reads the scores through.

The stand-in (tests/fake_spot_placement.py) follows the documented API: tests/fixtures/placement/PROVENANCE.md.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from infra.catalog.capacity import (
    PlacementScore,
    PlacementScores,
    load_placement_scores,
    placement_scores_path,
)
from infra.errors import CatalogError
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import isolated_env
from tests.fake_spot_placement import LIMIT_MESSAGE, FakeSpotPlacement

FIXTURES = Path(__file__).parent / "fixtures" / "placement"
TRN1_REGIONS = [
    "ap-south-1",
    "ap-southeast-2",
    "ap-southeast-4",
    "us-east-1",
    "us-east-2",
    "us-west-2",
]  # catalog
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def seed(fake: FakeSpotPlacement) -> None:
    """Scores as AWS would give them: fewer nodes, better odds (steps: capacity up to -> score)."""
    fake.set_scores("us-east-1", "", "trn1.32xlarge", {1: 9, 8: 6, 64: 3})
    fake.set_scores("us-west-2", "", "trn1.32xlarge", {1: 8, 8: 7, 64: 2})
    fake.set_scores("us-east-1", "use1-az4", "trn1.32xlarge", {1: 8, 8: 5})
    fake.set_scores("us-east-1", "use1-az6", "trn1.32xlarge", {1: 7, 8: 7, 64: 4})
    fake.set_scores("us-east-1", "", "p5.48xlarge", {1: 6, 8: 3})
    fake.set_scores("eu-west-1", "", "p5.48xlarge", {8: 5})  # not a p5 catalog region: AWS still scores it
    fake.set_scores("us-east-1", "use1-az2", "p5.48xlarge", {8: 4})


@pytest.fixture
def fake():
    server = FakeSpotPlacement().start()
    seed(server)
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path, fake):
    return {**isolated_env(tmp_path), **fake.env()}


def refresh(env, *args: str):
    return run_trainfleet("catalog", "refresh", "--cloud", "aws", "--placement-scores", *args, env=env)


def stored(tmp_path) -> dict:
    return json.loads((tmp_path / "placement-scores.json").read_text())


def rows_by_key(doc: dict) -> dict[tuple, int]:
    return {
        (r["instance_type"], r["target_capacity"], r["region"], r["zone"]): r["score"] for r in doc["scores"]
    }


# -- end to end through the CLI ----------------------------------------------------------------------------
def test_refresh_writes_scores_with_provenance(env, tmp_path, fake):
    result = refresh(env, "--instance-types", "trn1.32xlarge,p5.48xlarge", "--nodes", "8,1", "--json")
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["not_sent"] == [] and len(report["requests"]) == 8  # 2 types x 2 node counts x region|AZ

    doc = stored(tmp_path)
    assert doc["format"] == 1 and doc["source"] == "aws-get-spot-placement-scores"
    assert ISO_UTC.match(doc["fetched_at"]) and doc["endpoint_region"] == "us-east-1"
    assert set(fake.signing_regions) == {"us-east-1"}  # the API was called in the account's configured region
    for row in doc["scores"]:
        assert row["fetched_at"] == doc["fetched_at"] and row["source"] == doc["source"]
        assert row["single_az"] == (row["zone"] != "") and row["cloud"] == "aws"
    assert rows_by_key(doc) == {
        ("trn1.32xlarge", 1, "us-east-1", ""): 9, ("trn1.32xlarge", 1, "us-west-2", ""): 8,
        ("trn1.32xlarge", 8, "us-east-1", ""): 6, ("trn1.32xlarge", 8, "us-west-2", ""): 7,
        ("trn1.32xlarge", 1, "us-east-1", "use1-az4"): 8, ("trn1.32xlarge", 1, "us-east-1", "use1-az6"): 7,
        ("trn1.32xlarge", 8, "us-east-1", "use1-az4"): 5, ("trn1.32xlarge", 8, "us-east-1", "use1-az6"): 7,
        # p5.48xlarge is in 12 catalog regions, over the 10 RegionNames allow: every region asked, eu-west-1 too
        ("p5.48xlarge", 1, "us-east-1", ""): 6, ("p5.48xlarge", 1, "eu-west-1", ""): 5,
        ("p5.48xlarge", 8, "us-east-1", ""): 3, ("p5.48xlarge", 8, "eu-west-1", ""): 5,
        ("p5.48xlarge", 1, "us-east-1", "use1-az2"): 4, ("p5.48xlarge", 8, "us-east-1", "use1-az2"): 4,
    }  # fmt: skip

    asked = [
        (p["InstanceType.1"][0], p["TargetCapacity"][0], p["SingleAvailabilityZone"][0])
        for p in fake.requests
    ]
    assert sorted(asked) == sorted(
        (t, n, az) for t in ("trn1.32xlarge", "p5.48xlarge") for n in ("1", "8") for az in ("true", "false")
    )
    for p in fake.requests:
        assert p["TargetCapacityUnitType"] == ["units"] and "InstanceType.2" not in p
        regions = sorted(v[0] for k, v in p.items() if k.startswith("RegionName."))
        assert regions == (TRN1_REGIONS if p["InstanceType.1"] == ["trn1.32xlarge"] else [])

    scores = load_placement_scores(tmp_path / "placement-scores.json")
    hit = scores.lookup("aws", "us-east-1", "use1-az4", "trn1.32xlarge", 5)
    assert hit == PlacementScore(
        "aws",
        "us-east-1",
        "use1-az4",
        "trn1.32xlarge",
        8,
        5,
        doc["fetched_at"],
        "aws-get-spot-placement-scores",
    )


def test_table_for_people_and_merge_with_the_previous_file(env, tmp_path, fake):
    first = refresh(env, "--instance-types", "trn1.32xlarge", "--nodes", "1")
    assert first.code == 0, first.stderr
    assert "trn1.32xlarge" in first.stdout and "per AZ" in first.stdout and "per region" in first.stdout
    assert "4 scores from 2 of 2 requests" in first.stdout and "holds 4 scores" in first.stdout

    # AWS's answer changes: use1-az4 leaves the answer, us-west-2 improves. A new answer to the same question
    # replaces the old one wholesale (a zone that dropped out must not keep its old score); other rows stay.
    fake.set_scores("us-west-2", "", "trn1.32xlarge", {1: 10})
    del fake.scores[("us-east-1", "use1-az4", "trn1.32xlarge")]
    second = refresh(env, "--instance-types", "trn1.32xlarge", "--nodes", "1,8")
    assert second.code == 0, second.stderr
    keys = rows_by_key(stored(tmp_path))
    assert keys[("trn1.32xlarge", 1, "us-west-2", "")] == 10
    assert ("trn1.32xlarge", 1, "us-east-1", "use1-az4") not in keys
    assert keys[("trn1.32xlarge", 8, "us-east-1", "use1-az6")] == 7


def test_every_page_is_read(env, tmp_path, fake):
    fake.page_size = 1  # the service may return fewer items than MaxResults; the client must follow nextToken
    result = refresh(env, "--instance-types", "trn1.32xlarge", "--nodes", "1", "--json")
    assert result.code == 0, result.stderr
    assert sum(1 for p in fake.requests if "NextToken" in p) == 2  # 2 regions + 2 zones, one item a page
    assert {r["rows"] for r in result.json()["requests"]} == {2}
    assert len(stored(tmp_path)["scores"]) == 4


def test_config_limit_keeps_what_was_fetched_and_says_what_was_not(env, tmp_path, fake):
    fake.config_limit = 3
    result = refresh(env, "--instance-types", "trn1.32xlarge,p5.48xlarge", "--nodes", "1,8")
    assert result.code == 1, result.stderr
    assert "Traceback" not in result.stderr
    out = " ".join(result.stdout.split())
    assert "MaxConfigLimitExceeded" in out
    assert "not fetched: 4 more requests not sent" in out and "24 h" in out
    assert "p5.48xlarge" in out.split("not fetched:")[1]  # names what is missing
    keys = rows_by_key(stored(tmp_path))  # the three answered requests are in the file
    assert {(t, n) for t, n, _, _ in keys} == {("trn1.32xlarge", 1), ("trn1.32xlarge", 8)}
    assert ("trn1.32xlarge", 8, "us-east-1", "use1-az6") not in keys  # the 4th request (x8 per AZ) failed
    assert len(fake.requests) == 4  # nothing sent after the limit error

    # "you can retry the request configurations that you've already used" (user guide): the same three go through
    again = refresh(env, "--instance-types", "trn1.32xlarge", "--nodes", "1")
    assert again.code == 0, again.stdout


def test_budget_caps_new_configurations_per_run(env, tmp_path, fake):
    result = refresh(
        env, "--instance-types", "trn1.32xlarge", "--nodes", "1,2,4", "--max-configurations", "2"
    )
    assert result.code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "not fetched: 4 of 6 requests not sent: over this run's budget of 2" in out
    assert len(fake.requests) == 2


def test_default_plan_fits_the_default_budget(env, tmp_path, fake):
    """With no narrowing the plan is every catalog type DeepSpeed can drive x 7 node counts x 2, the largest
    training nodes first (offers.csv: p6-b300.48xlarge, 8 x 268 GiB, then p6-b200.48xlarge, 8 x 179 GiB; no
    Trainium): only 10 go, p6-b300's node counts 1 to 16 per region and per AZ, and the rest are named."""
    result = refresh(env, "--json")
    # p6-b300 is not in the stand-in's table: those requests fail alone
    assert result.code == 1
    report = result.json()
    assert len(report["requests"]) == 10 and len(fake.requests) == 10
    sent = [(r["instance_type"], r["target_capacity"]) for r in report["requests"]]
    assert sent == [("p6-b300.48xlarge", n) for n in (1, 2, 4, 8, 16) for _scope in (0, 1)]
    assert report["not_sent"] and "606 of 616 requests not sent" in report["not_sent"][0]


def test_an_unknown_instance_type_fails_alone(env, tmp_path, fake):
    result = refresh(env, "--instance-types", "dl1.24xlarge,trn1.32xlarge", "--nodes", "1", "--json")
    assert result.code == 1
    failed = [r for r in result.json()["requests"] if r["error"]]
    assert {r["instance_type"] for r in failed} == {"dl1.24xlarge"} and len(failed) == 2
    assert all("InvalidParameterValue" in r["error"] for r in failed)
    assert {r["instance_type"] for r in stored(tmp_path)["scores"]} == {"trn1.32xlarge"}


def test_target_capacity_over_the_account_limit_fails_alone(env, tmp_path, fake):
    fake.capacity_limit = 4
    result = refresh(env, "--instance-types", "trn1.32xlarge", "--nodes", "1,8", "--json")
    assert result.code == 1
    failed = {(r["target_capacity"], r["single_az"]) for r in result.json()["requests"] if r["error"]}
    assert failed == {(8, False), (8, True)}
    assert {r["target_capacity"] for r in stored(tmp_path)["scores"]} == {1}


def test_corrupt_previous_file_is_moved_aside_and_replaced(env, tmp_path, fake):
    (tmp_path / "placement-scores.json").write_text("{not json")
    result = refresh(env, "--instance-types", "trn1.32xlarge", "--nodes", "1")
    assert result.code == 0, result.stderr
    assert "previous file was corrupt and was moved to" in " ".join(result.stdout.split())
    assert [p.read_text() for p in tmp_path.glob("placement-scores.json.corrupt-*")] == ["{not json"]
    assert len(stored(tmp_path)["scores"]) == 4


def test_a_failed_write_leaves_the_previous_file(tmp_path, fake, monkeypatch):
    """In-process, so the write can be made to fail (a full disk at fsync) after the scores came back."""
    from infra.catalog.refresh import placement

    for k, v in {**isolated_env(tmp_path), **fake.env()}.items():
        monkeypatch.setenv(k, v)
    path = tmp_path / "placement-scores.json"
    placement.refresh_placement_scores(path, instance_types=["trn1.32xlarge"], nodes=[1])
    before = path.read_bytes()

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    fake.set_scores("us-east-1", "", "trn1.32xlarge", {1: 2})
    with pytest.raises(OSError) as caught:
        placement.refresh_placement_scores(path, instance_types=["trn1.32xlarge"], nodes=[1])
    monkeypatch.undo()
    message = str(caught.value)
    assert "no space left on device" in message and str(path) in message and "\n" not in message
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# -- bad input: one line, exit 2 ---------------------------------------------------------------------------
def test_without_credentials_one_line(tmp_path, fake):
    env = {**isolated_env(tmp_path), **fake.env(), "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
           "AWS_SESSION_TOKEN": ""}  # fmt: skip
    assert_one_line_error(
        refresh(env, "--instance-types", "trn1.32xlarge"), "no AWS credentials", "aws configure"
    )
    assert fake.requests == [] and not (tmp_path / "placement-scores.json").exists()


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--cloud", "azure", "--regions", "mars-1"], ["no Azure spot size", "--regions"]),
        (["--cloud", "gcp"], ["AWS's and Azure's spot placement scores", "advice.capacity", "not supported yet"]),
        (["--cloud", "awz"], ["'awz'", "did you mean aws"]),
        (["--nodes", "0"], ["--nodes '0'", "1 to 2,000,000,000"]),
        (["--nodes", "eight"], ["--nodes 'eight'"]),
        (["--nodes", ","], ["--nodes", "names nothing"]),
        (["--instance-types", "p5.48xlarg"], ["'p5.48xlarg'", "did you mean p5.48xlarge"]),
        (["--regions", ",".join(["us-east-1", "us-east-2", "us-west-1", "us-west-2", "eu-west-1", "eu-west-2",
                                 "eu-west-3", "eu-central-1", "eu-north-1", "ap-south-1", "ap-northeast-1"])],
         ["11 regions", "at most 10"]),
        (["--regions", "us-east-9"], ["'us-east-9'"]),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(env, fake, args, needles):
    cloud = ["--cloud", "aws"] if "--cloud" not in args else []
    result = run_trainfleet("catalog", "refresh", *cloud, "--placement-scores", *args, env=env)
    assert_one_line_error(result, *needles)
    assert fake.requests == []


def test_nodes_without_placement_scores_is_one_line(env):
    result = run_trainfleet("catalog", "refresh", "--cloud", "aws", "--nodes", "8", env=env)
    assert_one_line_error(result, "--placement-scores")


# -- the lookup rule, worked by hand -----------------------------------------------------------------------
def score(region, zone, capacity, value, instance_type="p5.48xlarge", cloud="aws") -> PlacementScore:
    return PlacementScore(cloud, region, zone, instance_type, capacity, value, "2026-11-26T00:00:00Z", "test")


HAND = PlacementScores(
    [
        score("us-east-1", "", 1, 9), score("us-east-1", "", 8, 6), score("us-east-1", "", 64, 3),
        score("us-east-1", "use1-az4", 8, 7), score("us-east-1", "use1-az4", 2, 8),
        score("us-west-2", "usw2-az1", 16, 5, instance_type="trn1.32xlarge"),
    ]
)  # fmt: skip


@pytest.mark.parametrize(
    ("region", "zone", "instance_type", "nodes", "expected"),
    [
        ("us-east-1", "", "p5.48xlarge", 1, (1, 9)),  # measured exactly
        ("us-east-1", "", "p5.48xlarge", 2, (8, 6)),  # 1 node's 9 says nothing about 2: the 8-node score
        ("us-east-1", "", "p5.48xlarge", 8, (8, 6)),
        ("us-east-1", "", "p5.48xlarge", 9, (64, 3)),
        ("us-east-1", "", "p5.48xlarge", 64, (64, 3)),
        ("us-east-1", "", "p5.48xlarge", 65, None),  # nothing measured at or above 65
        ("us-east-1", "use1-az4", "p5.48xlarge", 1, (2, 8)),  # a zone uses its own single-AZ rows
        ("us-east-1", "use1-az4", "p5.48xlarge", 3, (8, 7)),
        ("us-east-1", "use1-az4", "p5.48xlarge", 9, None),  # never the regional 64-node row for a zone
        ("us-east-1", "use1-az6", "p5.48xlarge", 1, None),  # a zone with no score of its own
        ("us-west-2", "", "trn1.32xlarge", 4, None),  # a region question never takes a zone's score
        ("us-west-2", "usw2-az1", "trn1.32xlarge", 4, (16, 5)),
        ("eu-west-1", "", "p5.48xlarge", 1, None),
    ],
)
def test_lookup_takes_the_smallest_measured_capacity_at_or_above_nodes(
    region, zone, instance_type, nodes, expected
):
    hit = HAND.lookup("aws", region, zone, instance_type, nodes)
    assert (None if hit is None else (hit.target_capacity, hit.score)) == expected
    if hit is not None:
        assert (hit.region, hit.zone, hit.instance_type) == (region, zone, instance_type)


def test_lookup_other_cloud_and_bad_nodes():
    assert HAND.lookup("gcp", "us-east-1", "", "p5.48xlarge", 1) is None
    assert PlacementScores().lookup("aws", "us-east-1", "", "p5.48xlarge", 1) is None
    with pytest.raises(ValueError):
        HAND.lookup("aws", "us-east-1", "", "p5.48xlarge", 0)


def test_default_scores_read_the_user_file(tmp_path, fake, monkeypatch):
    from infra.catalog import capacity
    from infra.catalog.refresh import placement

    for k, v in {**isolated_env(tmp_path), **fake.env()}.items():
        monkeypatch.setenv(k, v)
    capacity.default_placement_scores.cache_clear()
    assert placement_scores_path() == tmp_path / "placement-scores.json"
    assert len(capacity.default_placement_scores()) == 0  # no file yet: empty, not an error
    capacity.default_placement_scores.cache_clear()
    placement.refresh_placement_scores(instance_types=["trn1.32xlarge"], nodes=[8])
    capacity.default_placement_scores.cache_clear()
    hit = capacity.default_placement_scores().lookup("aws", "us-west-2", "", "trn1.32xlarge", 3)
    assert hit is not None and (hit.target_capacity, hit.score) == (8, 7)
    capacity.default_placement_scores.cache_clear()


# -- a corrupt file: one line naming the file and the fix --------------------------------------------------
GOOD_ROW = {"cloud": "aws", "region": "us-east-1", "zone": "", "instance_type": "p5.48xlarge", "target_capacity": 8,
            "score": 6, "single_az": False, "fetched_at": "2026-11-26T00:00:00Z", "source": "aws-get-spot-placement-scores"}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "not valid JSON"),
        ("[]", 'no "scores" list'),
        (json.dumps({"format": 2, "scores": []}), "format 2"),
        (json.dumps({"format": 1, "scores": [{**GOOD_ROW, "score": 11}]}), "score = 11"),
        (
            json.dumps({"format": 1, "scores": [{**GOOD_ROW, "target_capacity": "8"}]}),
            "target_capacity = '8'",
        ),
        (json.dumps({"format": 1, "scores": [{**GOOD_ROW, "zone": "use1-az4"}]}), "disagree"),
        (
            json.dumps({"format": 1, "scores": [GOOD_ROW, {**GOOD_ROW, "region": ""}]}),
            "score 2 has no region",
        ),
    ],
)
def test_corrupt_file_is_one_catalog_error(tmp_path, text, words):
    path = tmp_path / "placement-scores.json"
    path.write_text(text)
    with pytest.raises(CatalogError) as caught:
        load_placement_scores(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and words in message
    assert (
        "trainfleet catalog refresh --cloud aws --placement-scores" in message and f"delete {path}" in message
    )


def test_good_file_loads(tmp_path):
    path = tmp_path / "placement-scores.json"
    az = {**GOOD_ROW, "zone": "use1-az4", "single_az": True, "score": 3}
    path.write_text(json.dumps({"format": 1, "scores": [GOOD_ROW, az]}))
    scores = load_placement_scores(path)
    assert len(scores) == 2
    regional = scores.lookup("aws", "us-east-1", "", "p5.48xlarge", 8)
    zonal = scores.lookup("aws", "us-east-1", "use1-az4", "p5.48xlarge", 8)
    assert regional is not None and regional.score == 6 and zonal is not None and zonal.score == 3


# -- the stand-in against the service model and the documented behaviour -----------------------------------
def test_stand_in_speaks_the_service_model():
    """The vendored excerpt is the installed botocore's, and the stand-in's XML names and ranges are its."""
    import botocore

    vendored = json.loads((FIXTURES / "get-spot-placement-scores.model.json").read_text())
    model_path = Path(botocore.__file__).parent / "data" / "ec2" / "2016-11-15" / "service-2.json.gz"
    live = json.loads(gzip.open(model_path).read())
    for name, shape in vendored["shapes"].items():
        assert live["shapes"][name] == shape, name
    shapes = vendored["shapes"]
    result = shapes["GetSpotPlacementScoresResult"]["members"]
    assert result["SpotPlacementScores"]["locationName"] == "spotPlacementScoreSet"
    assert result["NextToken"]["locationName"] == "nextToken"
    assert shapes["SpotPlacementScores"]["member"]["locationName"] == "item"
    item = {m["locationName"] for m in shapes["SpotPlacementScore"]["members"].values()}
    assert item == {"region", "availabilityZoneId", "score"}
    from tests import fake_spot_placement as f

    assert (shapes["SpotPlacementScoresTargetCapacity"]["min"], shapes["SpotPlacementScoresTargetCapacity"]["max"]) \
        == (1, f.TARGET_CAPACITY_MAX)  # fmt: skip
    assert (shapes["SpotPlacementScoresMaxResults"]["min"], shapes["SpotPlacementScoresMaxResults"]["max"]) \
        == f.MAX_RESULTS  # fmt: skip
    assert shapes["RegionNames"]["max"] == f.MAX_REGION_NAMES
    assert shapes["InstanceTypes"]["max"] == f.MAX_INSTANCE_TYPES
    assert vendored["paginator"]["result_key"] == "SpotPlacementScores"


def ec2(fake, region="us-east-1"):
    return boto3.client("ec2", region_name=region, endpoint_url=fake.url,
                        aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip


def raw_post(fake, **params) -> tuple[int, str]:
    """A request botocore would refuse to send (its own validation), signed enough for the stand-in."""
    body = urllib.parse.urlencode(
        {"Action": "GetSpotPlacementScores", "Version": "2016-11-15", **params}
    ).encode()
    headers = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20261126/us-east-1/ec2/aws4_request, x"}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(fake.url, data=body, headers=headers), timeout=10
        ) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def code_of(call) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response["Error"]["Code"]


def test_stand_in_validates_like_the_service(fake):
    client = ec2(fake)
    base = {"InstanceTypes": ["trn1.32xlarge"], "TargetCapacity": 1}
    assert code_of(lambda: client.get_spot_placement_scores(**{**base, "RegionNames": ["r"] * 11})) \
        == "InvalidParameterValue"  # fmt: skip
    assert code_of(lambda: client.get_spot_placement_scores(**{**base, "InstanceTypes": ["p9.nope"]})) \
        == "InvalidParameterValue"  # fmt: skip
    assert (
        code_of(
            lambda: client.get_spot_placement_scores(
                **base, InstanceRequirementsWithMetadata={"ArchitectureTypes": ["x86_64"]}
            )
        )
        == "InvalidParameterCombination"
    )
    assert code_of(lambda: client.get_spot_placement_scores(**base, DryRun=True)) == "DryRunOperation"
    for params, name in [({"TargetCapacity": "0"}, "TargetCapacity"), ({"TargetCapacity": "2000000001"}, "TargetCapacity"),
                         ({"TargetCapacity": "1", "MaxResults": "9"}, "MaxResults"),
                         ({"TargetCapacity": "1", "MaxResults": "1001"}, "MaxResults"),
                         ({"TargetCapacity": "1", "SingleAvailabilityZone": "yes"}, "SingleAvailabilityZone")]:  # fmt: skip
        status, text = raw_post(fake, **{"InstanceType.1": "trn1.32xlarge", **params})
        assert status == 400 and "<Code>InvalidParameterValue</Code>" in text and name in text, (params, text)
    status, text = raw_post(fake, **{"InstanceType.1": "trn1.32xlarge"})
    assert status == 400 and "TargetCapacity" in text
    for token in ["bm90LWEtdG9rZW4=", "garbage!"]:
        assert (
            code_of(lambda t=token: client.get_spot_placement_scores(**base, NextToken=t))
            == "InvalidPaginationToken"
        )


def test_stand_in_scores_the_top_ten_and_pages(fake):
    for i in range(12):
        fake.set_scores(f"xx-test-{i}", "", "g5.xlarge", {1: 1 + i % 10})
    client = ec2(fake)
    pages = list(client.get_paginator("get_spot_placement_scores").paginate(
        InstanceTypes=["g5.xlarge"], TargetCapacity=1, PaginationConfig={"PageSize": 10}))  # fmt: skip
    items = [i for p in pages for i in p["SpotPlacementScores"]]
    assert len(items) == 10 and [i["Score"] for i in items] == sorted(
        (i["Score"] for i in items), reverse=True
    )
    assert all("AvailabilityZoneId" not in i for i in items)
    fake.page_size = 3
    pages = list(
        client.get_paginator("get_spot_placement_scores").paginate(
            InstanceTypes=["g5.xlarge"], TargetCapacity=1
        )
    )
    assert [len(p["SpotPlacementScores"]) for p in pages] == [3, 3, 3, 1]
    # a token belongs to the question that issued it
    token = pages[0]["NextToken"]
    assert (
        code_of(
            lambda: client.get_spot_placement_scores(
                InstanceTypes=["g5.xlarge"], TargetCapacity=2, NextToken=token
            )
        )
        == "InvalidPaginationToken"
    )


def test_stand_in_limits_new_configurations_per_rolling_day(fake):
    now = [1_000_000.0]
    fake.clock = lambda: now[0]
    fake.config_limit = 2
    client = ec2(fake)

    def ask(n):
        return client.get_spot_placement_scores(InstanceTypes=["trn1.32xlarge"], TargetCapacity=n)

    ask(1)
    ask(2)
    with pytest.raises(ClientError) as caught:
        ask(3)
    assert caught.value.response["Error"] == {"Code": "MaxConfigLimitExceeded", "Message": LIMIT_MESSAGE}
    ask(1)  # an already-used configuration may be asked again
    now[0] += 24 * 3600  # a rolling 24 h later the earlier ones no longer count
    ask(3)


def test_an_unreachable_endpoint_stops_at_the_first_request(tmp_path):
    env = isolated_env(tmp_path)  # AWS_ENDPOINT_URL points at a closed port
    result = refresh(env, "--instance-types", "trn1.32xlarge", "--nodes", "1,8", "--json")
    assert result.code == 1 and "Traceback" not in result.stderr
    report = result.json()
    assert len(report["requests"]) == 1 and report["requests"][0]["error"]
    assert report["not_sent"] and report["not_sent"][0].startswith("3 more requests not sent")
    assert not (tmp_path / "placement-scores.json").exists()
