"""`trainfleet catalog ...` as a user runs it: real process, real exit codes."""

from tests.conftest import assert_one_line_error


def test_help_lists_commands(trainfleet):
    result = trainfleet("--help")
    assert result.code == 0 and "catalog" in result.stdout


def test_list_filters_and_json_parses(trainfleet):
    rows = trainfleet("catalog", "list", "--accelerator", "A100-80GB", "--cloud", "aws", "--json").json()
    assert rows and {r["cloud"] for r in rows} == {"aws"}
    assert {r["accelerator"] for r in rows} == {"A100-80GB"}
    assert {"us-east-1", "us-west-2"} <= {r["region"] for r in rows}
    everything = trainfleet("catalog", "list", "--json").json()
    assert {r["cloud"] for r in everything} == {"aws", "gcp", "azure"}


def test_list_by_memory_and_purchase(trainfleet):
    rows = trainfleet("catalog", "list", "--min-memory", "80", "--purchase", "spot", "--json").json()
    assert rows and all(
        r["accelerator_memory_gib"] >= 80 and r["spot_usd_per_hour"] is not None for r in rows
    )


def test_list_table_for_people(trainfleet):
    result = trainfleet("catalog", "list", "--cloud", "gcp", "--region", "us-central1")
    assert result.code == 0
    assert "a2-highgpu-1g" in result.stdout and "us-central1" in result.stdout


def test_show_prints_provenance(trainfleet):
    info = trainfleet("catalog", "show", "p4de.24xlarge", "--region", "us-east-1", "--json").json()
    assert info["accelerator"] == "A100-80GB" and info["accelerators_per_node"] == 8
    assert {o["region"] for o in info["offers"]} == {"us-east-1"}
    assert info["sources"]["skypilot-aws"]["commit"] == "00148f2af3672e2229b4f7bf8157d5a3f36e3c35"
    table = trainfleet("catalog", "show", "p4de.24xlarge", "--region", "us-east-1")
    assert "00148f2af3672e2229b4f7bf8157d5a3f36e3c35" in table.stdout


def test_bad_filter_values_exit_2_with_one_line(trainfleet):
    assert_one_line_error(
        trainfleet("catalog", "list", "--cloud", "awz"), "--cloud", "'awz'", "aws, gcp, azure"
    )
    assert_one_line_error(trainfleet("catalog", "list", "--accelerator", "A100-80"), "did you mean A100-80GB")
    assert_one_line_error(trainfleet("catalog", "list", "--min-memory", "lots"), "--min-memory")
    assert_one_line_error(trainfleet("catalog", "show", "p4de.24xlarg"), "did you mean p4de.24xlarge")
    assert_one_line_error(trainfleet("catalog", "show", "p4de.24xlarge", "--region", "mars-1"), "mars-1")
    assert_one_line_error(trainfleet("catalog", "lst"), "lst")
