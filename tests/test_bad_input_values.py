"""Issue 10, part A: bad numbers and values never crash. Each gives one line on stderr, exit code 2.

The commands run in-process through `cli.app.main` (the console-script entry point); expected values are
worked by hand in the comments, not computed by the code under test.
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import pytest

from cli.output import print_json
from infra.catalog import default_catalog
from infra.catalog.loader import DATA_DIR
from infra.config import StackConfig
from infra.errors import ConfigError, TrainfleetError, shown
from infra.units import parse_count, parse_hours, parse_money, parse_number
from tests.conftest import STACKS, one_line_error

PLAN = ["plan", "--model", "llama-7b", "--tokens", "1B"]
LONG = "9" * 5000  # a 5,000-character value


def assert_says(line: str, *needles: str) -> None:
    for needle in needles:
        assert needle in line, (needle, line)


# ---------------------------------------------------------------- case 1: counts below 1, non-whole counts


def test_params_below_one_is_refused_not_rounded_to_zero(capsys):
    line = one_line_error(capsys, "plan", "--params", "0.4", "--tokens", "1B")
    assert_says(line, "--params", "'0.4'", "at least 1")


def test_tokens_below_one_is_refused_not_priced_at_zero(capsys):
    line = one_line_error(capsys, "plan", "--model", "llama-7b", "--tokens", "0.4")
    assert_says(line, "--tokens", "'0.4'", "at least 1")


def test_tokens_fewer_than_one_global_batch_is_refused(capsys):
    # the default global batch of a full run is 2,048 sequences of 2,048 = 4,194,304 tokens; 1,000 tokens is no
    # optimizer step
    line = one_line_error(capsys, "plan", "--model", "llama-7b", "--tokens", "1000")
    assert_says(line, "--tokens", "'1000'", "4,194,304", "--global-batch")


def test_non_whole_counts_are_refused_whole_ones_parse_exactly():
    with pytest.raises(TrainfleetError, match=r"'2.5' is not a whole number"):
        parse_count("2.5", "--params")
    assert parse_count("1.5K") == 1_500  # 1.5 x 1,000
    assert parse_count("6.7B") == 6_700_000_000  # 6.7 x 10^9, exact
    assert parse_count(3.0) == 3


def test_stack_file_with_a_count_below_one_fails_stacks_check(capsys, tmp_path: Path):
    text = (STACKS / "Pulumi.dev.yaml").read_text()
    bad = tmp_path / "Pulumi.tiny.yaml"
    lines = text.splitlines()
    params = next(i for i, line in enumerate(lines) if line.strip().startswith("params:"))
    indent = lines[params][: len(lines[params]) - len(lines[params].lstrip())]
    lines[params] = f"{indent}params: '0.4'"
    bad.write_text("\n".join(lines) + "\n")
    line = one_line_error(capsys, "stacks", "check", "--stack", str(bad))
    assert_says(line, "trainfleet:job.params", "'0.4'", "at least 1")


# ---------------------------------------------------------------- case 2: NaN, infinity, out of range


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-5", "0", "$(id)", "lots", ""])
def test_bad_budget_is_one_line(capsys, value):
    line = one_line_error(capsys, *PLAN, "--budget", value)
    assert_says(line, "--budget", repr(value))


def test_budget_forms_people_write():
    assert parse_money("$40,000") == 40_000.0
    assert parse_money("40K") == 40_000.0  # 40 x 1,000
    assert parse_money("2.5M") == 2_500_000.0  # 2.5 x 10^6
    assert parse_money("1e12") == 1e12  # the largest amount allowed
    with pytest.raises(TrainfleetError, match=r"from \$0.01 to \$1e12"):
        parse_money("1.5e12")
    with pytest.raises(TrainfleetError, match=r"from \$0.01"):
        parse_money("1e-400")  # would round to $0.00


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "1e7"])
def test_bad_time_value_is_one_line(capsys, value):
    line = one_line_error(capsys, *PLAN, "--time-value", value)
    assert_says(line, "--time-value", repr(value))


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "-0.05", "0.95", "10%", "abc", ""])
@pytest.mark.parametrize("command", ["plan", "estimate"])
def test_bad_memory_headroom_is_one_line(capsys, command, value):
    """A share of device memory from 0 to 0.9; anything else (10% as text included) is refused by name."""
    base = PLAN if command == "plan" else ["estimate", "--model", "llama-7b", "--tokens", "1B", "--accelerator",
                                            "A100-80GB", "--devices", "8"]  # fmt: skip
    line = one_line_error(capsys, *base, "--memory-headroom", value)
    assert_says(line, "--memory-headroom", repr(value))


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1"])
def test_bad_min_memory_is_one_line_not_an_unfiltered_list(capsys, value):
    line = one_line_error(capsys, "catalog", "list", "--min-memory", value, "--json")
    assert_says(line, "--min-memory", repr(value))


def test_huge_device_count_is_bounded(capsys):
    line = one_line_error(capsys, "estimate", "--model", "llama-7b", "--tokens", "1B",
                          "--accelerator", "A100-80GB", "--devices", "99999999999")  # fmt: skip
    assert_says(line, "--devices", "1000000")


def test_deadline_is_bounded_to_ten_years(capsys):
    assert parse_hours("3650d") == 87_600  # 3,650 days x 24 h
    line = one_line_error(capsys, *PLAN, "--deadline", "3651d")
    assert_says(line, "--deadline", "'3651d'", "10 years")


def test_plan_longer_than_ten_years_is_refused(capsys):
    # 1e18 tokens of a 7B model at roughly 1e5 tokens/s per node would take centuries
    line = one_line_error(capsys, "plan", "--model", "llama-7b", "--tokens", "1e18")
    assert_says(line, "more than 10 years", "87,600 h", "--tokens")


def test_finite_number_parser_for_float_options():
    assert parse_number("2.5", "--x", minimum=0, maximum=10) == 2.5
    for bad in ("nan", "inf", "-inf", "1e400", "1_0", "0x10"):
        with pytest.raises(TrainfleetError, match="not a finite number"):
            parse_number(bad, "--x")
    with pytest.raises(TrainfleetError, match="from 0 to 10"):
        parse_number("11", "--x", minimum=0, maximum=10)


def test_print_json_refuses_nan_and_infinity(capsys):
    with pytest.raises(TrainfleetError, match=r"not finite .* at best\.cost\[1\]"):
        print_json({"best": {"cost": [1.0, float("inf")]}})
    with pytest.raises(TrainfleetError, match="not finite"):
        print_json([float("nan")])
    assert capsys.readouterr().out == ""


def _overlay_with(tmp_path: Path, column: str, value: str) -> Path:
    with (DATA_DIR / "offers.csv").open(newline="") as fh:
        header, first = list(csv.reader(fh))[:2]
    row = dict(zip(header, first, strict=True))
    row[column] = value
    path = tmp_path / "catalog-overlay.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*header, "as_of"])
        writer.writerow([row[c] for c in header] + ["2026-11-01T00:00:00Z"])
    return path


@pytest.fixture
def overlay_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINFLEET_HOME", str(tmp_path))
    default_catalog.cache_clear()
    yield tmp_path
    default_catalog.cache_clear()


@pytest.mark.parametrize(
    "column,value",
    [("on_demand_usd_per_hour", "nan"), ("spot_usd_per_hour", "inf"), ("on_demand_usd_per_hour", "1e400"),
     ("spot_usd_per_hour", "1e300"), ("accelerators_per_node", "nan"), ("accelerators_per_node", "1e400"),
     ("accelerators_per_node", "2.5"), ("accelerator_memory_gib", "-inf"), ("memory_gib", "1e400"),
     ("network_gbps", "nan"), ("interruption_bucket", "inf")],
)  # fmt: skip
def test_corrupt_overlay_numbers_are_one_line_naming_file_line_and_column(capsys, overlay_home, column, value):
    path = _overlay_with(overlay_home, column, value)
    for args in (["catalog", "list", "--json"], PLAN):
        line = one_line_error(capsys, *args)
        assert_says(line, str(path), "line 2", f"column {column}", repr(value), "catalog refresh")


VALID = {
    "job": {"params": "7B", "tokens": "200B"},
    "fleets": [{"name": "main", "cloud": "aws", "region": "us-east-1", "instance_type": "p4de.24xlarge",
                "nodes": 4}],
    "budget": {"monthly_limit_usd": 50000, "recipients": ["a@example.com"]},
}  # fmt: skip
AZURE_FLEET = {"name": "adev", "cloud": "azure", "region": "eastus", "instance_type": "Standard_NC24ads_A100_v4",
               "nodes": 1}  # fmt: skip
GCP_FLEET = {"name": "gdev", "cloud": "gcp", "region": "us-central1", "instance_type": "a2-highgpu-1g", "nodes": 1}


def config_with(section: str, key: str, value, fleet: dict | None = None) -> dict:
    data = copy.deepcopy(VALID)
    if fleet is not None:
        data["fleets"] = [copy.deepcopy(fleet)]
    target = data["fleets"][0] if section == "fleet" else data.setdefault(section, {})
    target[key] = value
    return data


def config_error(data: dict) -> str:
    with pytest.raises(ConfigError) as err:
        StackConfig.from_sections(data)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    "section,key,value,bound",
    [("job", "planned_hours", 1e308, "87600"), ("job", "deadline_hours", 87_601, "87600"),
     ("job", "planned_cost_usd", 1e308, "1000000000000"), ("budget", "monthly_limit_usd", 1e13, "1000000000000"),
     ("budget", "fail_above_usd", float("inf"), "finite"), ("fleet", "max_price", 1e308, "100000"),
     ("checkpoint", "interval_minutes", 1e308, "525600")],
)  # fmt: skip
def test_stack_figures_have_sane_upper_bounds(section, key, value, bound):
    message = config_error(config_with(section, key, value))
    where = "fleets[0]" if section == "fleet" else section
    assert_says(message, f"trainfleet:{where}.{key}", bound)


def test_planned_hours_within_bounds_still_load():
    config = StackConfig.from_sections(config_with("job", "planned_hours", 87_600))  # exactly ten years
    assert config.job.planned_hours == 87_600


# ---------------------------------------------------------------- case 3: an empty comma list is not "all"


@pytest.mark.parametrize("option", ["--regions", "--clouds", "--accelerators"])
@pytest.mark.parametrize("value", [",", " , ,", ""])
def test_empty_comma_list_is_an_error_not_all(capsys, option, value):
    line = one_line_error(capsys, *PLAN, option, value)
    assert_says(line, option, "names nothing")


def test_refresh_with_empty_regions_is_an_error_not_all(capsys, tmp_path):
    line = one_line_error(capsys, "catalog", "refresh", "--cloud", "aws", "--regions", ",",
                          "--overlay", str(tmp_path / "overlay.csv"))  # fmt: skip
    assert_says(line, "--regions", "names nothing")
    assert not (tmp_path / "overlay.csv").exists()


# ---------------------------------------------------------------- case 4: messages that are true and short


MILLION_SEQUENCES = ("--global-batch", str(10**6 * 2048))


def test_estimate_on_demand_failure_does_not_suggest_on_demand(capsys):
    # 1,000,000 A100s = 125,000 eight-GPU nodes: failures alone interrupt the run every few minutes (a batch of
    # one sequence per device, so that the batch is not what is refused)
    line = one_line_error(capsys, "estimate", "--model", "llama-7b", "--tokens", "10T", *MILLION_SEQUENCES,
                          "--accelerator", "A100-80GB", "--devices", "1000000")  # fmt: skip
    assert "--purchase on-demand" not in line
    assert_says(line, "1,000,000 x A100-80GB", "125,000 nodes", "on-demand", "hardware failures", "fewer --devices")


def test_estimate_spot_failure_suggests_on_demand(capsys):
    line = one_line_error(capsys, "estimate", "--model", "llama-7b", "--tokens", "10T", *MILLION_SEQUENCES,
                          "--accelerator", "A100-80GB", "--devices", "1000000", "--purchase", "spot")  # fmt: skip
    assert_says(line, "spot", "--purchase on-demand")


def test_estimate_without_any_price_for_that_purchase_says_so(capsys):
    # the embedded catalog has Trainium2 with spot prices only; with no on-demand price, say that
    line = one_line_error(capsys, "estimate", "--params", "7B", "--tokens", "1B", "--accelerator", "Trainium2",
                          "--devices", "16")  # fmt: skip
    assert_says(line, "Trainium2", "on-demand price", "--purchase spot")


def test_user_values_are_echoed_as_given():
    assert shown("$(id)") == "'$(id)'"
    assert shown("plain") == "'plain'"


@pytest.mark.parametrize(
    "args",
    [[*PLAN, "--budget", LONG], [*PLAN, "--regions", "x" * 5000], [*PLAN, "--purchase", "x" * 5000],
     ["plan", "--params", LONG, "--tokens", "1B"], ["catalog", "show", "x" * 5000],
     ["catalog", "list", "--region", "x" * 5000], [*PLAN, "--deadline", LONG],
     ["plan", "--model", "x" * 5000, "--tokens", "1B"], ["catalog", "list", "--cloud", "x" * 5000]],
)  # fmt: skip
def test_long_values_are_cut_in_messages(capsys, args):
    line = one_line_error(capsys, *args)
    assert len(line) < 400, len(line)
    assert "(5000 chars)" in line


def test_shown_cuts_long_values_and_keeps_the_quote():
    text = shown("y" * 5000)
    assert text == repr("y" * 50) + "... (5000 chars)"  # limit 60 - 10 = 50 characters kept
    assert len(shown(list(range(1000)))) == 60


# ---------------------------------------------------------------- case 5: schema gaps


@pytest.mark.parametrize(
    "cidrs,needle",
    [(["0.0.0.0/1", "128.0.0.0/1"], "'0.0.0.0/1'"),  # the whole internet, split in halves
     (["10.0.0.0/7"], "at most a /8"),
     (["10.0.0.0/8", "11.0.0.0/8"], "together"),  # two /8s = 2 x 2^24 addresses, more than one /8
     (["::/1"], "at most a /32"),
     (["2001:db8::/31"], "at most a /32"),
     (["x" * 300], "(300 chars)")],
)  # fmt: skip
def test_broad_ssh_cidrs_are_refused(cidrs, needle):
    message = config_error(config_with("fleet", "ssh_cidrs", cidrs))
    assert_says(message, "trainfleet:fleets[0].ssh_cidrs", needle)


@pytest.mark.parametrize(
    "cidrs", [["10.0.0.0/8"], ["10.0.0.0/8", "10.1.0.0/16"], ["203.0.113.0/24", "2001:db8::/32"]]
)
def test_narrow_ssh_cidrs_load(cidrs):
    # 10.1.0.0/16 lies inside 10.0.0.0/8, so together they are still one /8
    assert StackConfig.from_sections(config_with("fleet", "ssh_cidrs", cidrs)).fleets[0].ssh_cidrs == cidrs


@pytest.mark.parametrize(
    "name,needle",
    [("ab", "3 to 63"), ("a" * 64, "3 to 63"), ("My-Bucket", "lowercase"), ("-ckpts", "begin and end"),
     ("ckpts-", "begin and end"), ("my..ckpts", "two adjacent periods"), ("192.168.5.4", "IP address"),
     ("xn--ckpts", "'xn--'"), ("sthree-ckpts", "'sthree-'"), ("amzn-s3-demo-ckpts", "'amzn-s3-demo-'"),
     ("ckpts-s3alias", "'-s3alias'"), ("ckpts--ol-s3", "'--ol-s3'"), ("ckpts.mrap", "'.mrap'"),
     ("ckpts--x-s3", "'--x-s3'"), ("ckpts--table-s3", "'--table-s3'"), ("my_ckpts", "lowercase")],
)  # fmt: skip
def test_s3_bucket_names_follow_aws_rules(name, needle):
    message = config_error(config_with("checkpoint", "bucket_name", name))
    assert_says(message, "trainfleet:checkpoint.bucket_name", needle, "aws")


@pytest.mark.parametrize("name", ["my-ckpts", "ckpts.example.com", "a1b", "a" * 63])
def test_valid_s3_bucket_names_load(name):
    assert StackConfig.from_sections(config_with("checkpoint", "bucket_name", name)).checkpoint.bucket_name == name


@pytest.mark.parametrize(
    "name,needle",
    [("goog-ckpts", "'goog'"), ("my-google-ckpts", "google"), ("my-g00gle-ckpts", "google"),
     ("ckpts_", "begin and end"), ("10.0.0.1", "IP address"), ("a" * 64, "3 to 63")],
)  # fmt: skip
def test_gcs_bucket_names_follow_gcs_rules(name, needle):
    message = config_error(config_with("checkpoint", "bucket_name", name, fleet=GCP_FLEET))
    assert_says(message, "trainfleet:checkpoint.bucket_name", needle, "gcp")


def test_gcs_allows_underscores_that_s3_refuses():
    config = StackConfig.from_sections(config_with("checkpoint", "bucket_name", "my_ckpts", fleet=GCP_FLEET))
    assert config.checkpoint.bucket_name == "my_ckpts"
    config_error(config_with("checkpoint", "bucket_name", "my_ckpts"))  # the aws fleet: refused


@pytest.mark.parametrize("name", ["my.ckpts", "my--ckpts", "my_ckpts", "-ckpts"])
def test_azure_names_follow_container_rules(name):
    message = config_error(config_with("checkpoint", "bucket_name", name, fleet=AZURE_FLEET))
    assert_says(message, "trainfleet:checkpoint.bucket_name", "azure")


@pytest.mark.parametrize("zones", [["eastus-1"], ["1", "4"], ["0"], ["us-east-1a"]])
def test_azure_zones_are_1_2_3(zones):
    message = config_error(config_with("fleet", "zones", zones, fleet=AZURE_FLEET))
    assert_says(message, "trainfleet:fleets[0].zones", "1, 2, 3")


def test_azure_logical_zones_load():
    config = StackConfig.from_sections(config_with("fleet", "zones", ["1", "2", "3"], fleet=AZURE_FLEET))
    assert config.fleets[0].zones == ["1", "2", "3"]


# ---------------------------------------------------------------- case 6: other options


def test_spend_until_far_future_is_one_line(capsys):
    line = one_line_error(capsys, "spend", "--stack", "dev", "--since", "2026-01-01", "--until", "9999-12-31")
    assert_says(line, "--until", "9999-12-31", "future")


@pytest.mark.parametrize("value", ["0", "-3", "1e400", "nan"])
def test_max_nodes_and_top_reject_out_of_range(capsys, value):
    one_line_error(capsys, *PLAN, "--max-nodes", value)
    one_line_error(capsys, *PLAN, "--top", value)


# Float options whose command module belongs to another part of issue 10; they are to switch to
# cli.options.finite_float too (preview's --fail-above accepts 'inf' today).
PENDING_FLOAT_OPTIONS: set[tuple[str, str]] = set()


def test_every_float_option_refuses_non_finite_values():
    """Every float option of every command, read from the commands' own annotations (what Typer builds its options
    from, whatever its version keeps on the click parameters)."""
    import typing

    from typer.models import OptionInfo

    from cli.app import _register, app

    _register()

    def commands(typer_app, path=()):
        for c in typer_app.registered_commands:
            yield (*path, c.name), c.callback
        for g in typer_app.registered_groups:
            yield from commands(g.typer_instance, (*path, g.name))

    checked = set()
    for path, callback in commands(app):
        for name, hint in typing.get_type_hints(callback, include_extras=True).items():
            if typing.get_origin(hint) is not typing.Annotated:
                continue
            annotation, *extras = typing.get_args(hint)
            if float not in (annotation, *typing.get_args(annotation)):
                continue
            key = (" ".join(path), name)
            if key in PENDING_FLOAT_OPTIONS:
                continue
            info = next((e for e in extras if isinstance(e, OptionInfo)), None)
            assert info is not None and info.parser is not None, f"{key}: declare it with parser=finite_float(...)"
            for bad in ("nan", "inf", "1e400"):
                with pytest.raises(TrainfleetError, match="not a finite number"):
                    info.parser(bad)
            checked.add(key)
    assert {("plan", "time_value"), ("plan", "memory_headroom"), ("estimate", "memory_headroom"),
            ("catalog list", "min_memory"), ("plan", "data_stall"), ("estimate", "data_stall")} <= checked  # fmt: skip


# ---------------------------------------------------------------- usage files: bounded like the stack's own figures


@pytest.mark.parametrize(
    "text,needle",
    [
        ("job_hours: 1.0e+308\n", "87600"),  # ten years of hours, as for planned_hours
        ("checkpoint_gb: .inf\n", "checkpoint_gb"),
        ("egress_gb_per_month: 2.0e+9\n", "1000000000"),  # an exabyte per month is a typo
    ],
)
def test_usage_file_figures_are_bounded(capsys, tmp_path: Path, text, needle):
    usage = tmp_path / "usage.yaml"
    usage.write_text(text)
    line = one_line_error(capsys, "preview", "--stack", str(STACKS / "Pulumi.dev.yaml"), "--usage-file", str(usage))
    assert_says(line, str(usage), needle)


def test_a_long_date_is_cut_in_the_message(capsys):
    line = one_line_error(capsys, "spend", "--stack", str(STACKS / "Pulumi.dev.yaml"), "--since", LONG)
    assert_says(line, "--since", "(5000 chars)")
    assert len(line) < 200


# ---- a refreshed catalog overlay: every field of every row by the embedded catalog's rules (issue 27) ----------

OVERLAY_BAD_FIELDS = [
    # (column, value, what the one line says); each passed the loader before and broke a command later, or was
    # shown as it was: a node of 0 GPUs divided by zero in `estimate`, $0 made a free plan, an escape reached
    # the terminal, a date that is no date or from the future aged prices wrongly.
    ("accelerators_per_node", "0", "is outside 1..1024"),
    ("accelerator_memory_gib", "0", "must be more than 0"),
    ("vcpus", "-8", "must be more than 0"),
    ("on_demand_usd_per_hour", "0", "must be more than 0"),
    ("spot_usd_per_hour", "1e400", "is not a finite number"),
    ("network_gbps", "0", "must be more than 0"),
    ("instance_type", "p4d;rm -rf /", "is not an instance type"),
    ("note", "cheap\x1b[2J", "is not one line of at most 500 printable characters"),
    ("as_of", "2026-13-45", "is not a UTC time"),
    ("as_of", "2099-01-01T00:00:00Z", "is in the future"),
]
ESTIMATE_A100_40GB = ["estimate", "--params", "7B", "--tokens", "1B", "--accelerator", "A100-40GB", "--devices", "16"]


@pytest.mark.parametrize("column, value, says", OVERLAY_BAD_FIELDS)
@pytest.mark.parametrize("argv", [ESTIMATE_A100_40GB, ["catalog", "list", "--json"],
                                  [*PLAN, "--accelerators", "A100-40GB"]], ids=["estimate", "list", "plan"])
def test_an_overlay_row_out_of_bounds_is_one_line_naming_file_line_and_field(tmp_path, column, value, says, argv):
    from tests.conftest import assert_one_line_error, run_trainfleet

    rows = list(csv.reader((DATA_DIR / "offers.csv").open()))
    header, p4d = rows[0], [r for r in rows[1:] if r[3] == "p4d.24xlarge"]
    overlay = [[*header, "as_of"]] + [[*r, "2026-11-01T00:00:00Z"] for r in p4d]
    overlay[2][[*header, "as_of"].index(column)] = value  # the second row (file line 3) of A100-40GB nodes
    with (tmp_path / "catalog-overlay.csv").open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(overlay)
    result = run_trainfleet(*argv, env={"TRAINFLEET_HOME": str(tmp_path)})
    assert_one_line_error(result, f"{tmp_path / 'catalog-overlay.csv'} line 3: column {column} = ", says,
                          "catalog refresh")  # fmt: skip


# ---- YAML anchors and aliases: bounded, never expanded without limit (issue 27) -----------------------------


def billion_laughs(levels: int = 9) -> str:
    """Nine lines that stand for 9**9 (387 million) strings once aliases are expanded."""
    lines = ['  other:bomb:', '    a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("bomb, says", [
    (billion_laughs(), "aliases expand it past 100,000 values"),
    ("  other:loop: &loop [1, *loop]\n", "an alias refers to the anchor it is inside of"),
], ids=["billion-laughs", "self-reference"])  # fmt: skip
@pytest.mark.parametrize("argv", [["stacks", "check", "-s", "bomb"], ["preview", "--stack", "bomb"],
                                  [*PLAN, "--write-stack", "bomb", "--force"]], ids=["check", "preview", "plan"])
def test_a_stack_whose_aliases_never_end_is_one_line_in_well_under_a_second(tmp_path, bomb, says, argv):
    """`plan --write-stack bomb --force` ran for minutes on the billion-laughs file (its round-trip editor expanded
    it) and grew without bound; the one loader refuses it before anything walks it, and the file is kept."""
    from tests.conftest import assert_one_line_error, run_trainfleet

    (tmp_path / "stacks").mkdir()
    (tmp_path / "Pulumi.yaml").write_text((STACKS.parent / "Pulumi.yaml").read_text())
    stack = tmp_path / "stacks" / "Pulumi.bomb.yaml"
    stack.write_text((STACKS / "Pulumi.dev.yaml").read_text().rstrip("\n") + "\n" + bomb)
    before = stack.read_bytes()
    result = run_trainfleet(*argv, cwd=tmp_path, timeout=30)
    assert_one_line_error(result, "Pulumi.bomb.yaml line ", says)
    assert stack.read_bytes() == before and sorted(p.name for p in stack.parent.iterdir()) == ["Pulumi.bomb.yaml"]
