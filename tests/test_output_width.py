"""Human tables at 80 and 200 columns: no identifier or header word broken across lines, no line too long.

Each command runs in-process through `cli.app.main` (offline, embedded catalog, Pulumi mocks) with
$COLUMNS set, as a CI log or a pipe gets it, and again with --json: every instance type, region, zone,
stack, fleet, resource name, source and (where the column is shown) file path and resource type in
the JSON must appear whole on one line of the table output, and never folded over two lines.
"""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from cli.app import main
from cli.preview.report import type_label
from tests.conftest import REPO, STACKS

# Every header word the tables use: none may be folded ("interrupti / on"), at any width.
HEADER_WORDS = """nodes instance purchase where wall expected cost interruption devices setup zones compute loss
checkpoint overhead storage egress total cloud region type accelerators on-demand spot cheapest zone
source from offers age stack clouds fleets resources components price/hour file fleet raw gzip sent
encoded limit headroom fetched boot resource monthly qty unit price planned job change base head
$/mo""".split()


def run(capsys, monkeypatch, tmp_path, columns: int, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("TRAINFLEET_HOME", str(tmp_path / "home"))  # no overlay: the embedded snapshot only
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    return out


def folded(lines: list[str], word: str) -> list[str]:
    """Where `word` was broken over two lines of a table cell: its head ends a token on one line and
    its tail starts a token on the next, left-aligned (same start) or right-aligned (same end)."""
    found = []
    for i in range(len(lines) - 1):
        for k in range(1, len(word)):
            head, tail = word[:k], word[k:]
            for m in re.finditer(re.escape(head) + r"(?=\s|$)", lines[i]):
                if m.start() and not lines[i][m.start() - 1].isspace():
                    continue
                start, end = m.start(), m.end()
                below = lines[i + 1]
                left = below[start : start + len(tail)] == tail and (start == 0 or below[start - 1].isspace())
                right = (
                    end >= len(tail)
                    and below[end - len(tail) : end] == tail
                    and (end - len(tail) == 0 or below[end - len(tail) - 1].isspace())
                )
                if left or right:
                    found.append(f"{head!r} / {tail!r} at line {i + 1}")
    return found


def check(out: str, width: int, identifiers: set[str]) -> None:
    lines = out.splitlines()
    long = [line for line in lines if cell_len(line) > width]
    assert not long, f"{len(long)} lines wider than {width}: {long[:3]}"
    missing = sorted(x for x in identifiers if not any(x in line for line in lines))
    assert not missing, f"not whole on any line at {width} columns: {missing[:10]}\n{out[:3000]}"
    broken = [f for word in identifiers | set(HEADER_WORDS) for f in folded(lines, word)]
    assert not broken, f"split at {width} columns: {broken[:10]}\n{out[:3000]}"


def as_json(capsys, monkeypatch, tmp_path, *args: str):
    return json.loads(run(capsys, monkeypatch, tmp_path, 200, *args, "--json"))


def plan_ids(data, width):
    plans = [data["best"], *data["alternatives"], *data["frontier"]]
    return {p["instance_type"] for p in plans} | {p["region"] for p in plans}


def estimate_ids(data, width):
    return {data["instance_type"], data["region"], data["cloud"]}


def list_ids(rows, width):
    return {r["instance_type"] for r in rows} | {r["region"] for r in rows}


def show_ids(info, width):
    offers = info["offers"]
    return {o["region"] for o in offers} | {o["zone"] for o in offers} | set(info["sources"])


def status_ids(data, width):
    return {g["region"] for g in data["groups"]} | {g["source"] for g in data["groups"]}


def stacks_ids(results, width):
    ids = {r["stack"] for r in results} | {f for r in results for f in r["fleets"]}
    if width >= 200:  # the file column is the first to go at 80
        ids |= {str(STACKS.relative_to(REPO) / f"Pulumi.{r['stack']}.yaml") for r in results}
    return ids


def render_ids(summaries, width):
    return {s["fleet"] for s in summaries} | ({s["cloud"] for s in summaries} if width >= 200 else set())


def preview_ids(est, width):
    shown = [r for r in est["resources"] if r["status"] != "free"]
    ids = {r["name"] for r in shown}
    return ids | ({type_label(r["type"]) for r in shown} if width >= 200 else set())


def diff_ids(diff, width):
    changed = [r for r in diff["resources"] if r["op"] != "same"]
    ids = {r["name"] for r in changed} | {c["path"] for r in changed for c in r["changed_inputs"]}
    return ids | ({type_label(r["type"]) for r in changed} if width >= 200 else set())


COMMANDS = {
    "plan": (["plan", "--model", "llama-7b", "--tokens", "200B"], plan_ids),
    "estimate": (
        [
            "estimate",
            "--model",
            "llama-7b",
            "--tokens",
            "200B",
            "--accelerator",
            "A100-80GB",
            "--devices",
            "64",
        ],
        estimate_ids,
    ),  # fmt: skip
    "catalog list": (["catalog", "list", "--cloud", "aws"], list_ids),
    "catalog show": (["catalog", "show", "p4d.24xlarge"], show_ids),
    "catalog status": (["catalog", "status"], status_ids),
    "stacks check": (["stacks", "check", "-s", "dev"], stacks_ids),
    "preview": (["preview", "-s", "dev"], preview_ids),
}


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_tables_fit_without_breaking_identifiers(name, width, capsys, monkeypatch, tmp_path):
    args, ids = COMMANDS[name]
    data = as_json(capsys, monkeypatch, tmp_path, *args)
    check(run(capsys, monkeypatch, tmp_path, width, *args), width, ids(data, width))


@pytest.mark.parametrize("width", [80, 200])
def test_render_table_fits(width, capsys, monkeypatch, tmp_path):
    args = ["render", "-s", "dev", "--out", str(tmp_path / "userdata")]
    data = as_json(capsys, monkeypatch, tmp_path, *args)
    out = run(capsys, monkeypatch, tmp_path, width, *args)
    check(out, width, render_ids(data, width) | {str(tmp_path / "userdata")})


@pytest.fixture
def head_stack(tmp_path):
    head = tmp_path / "head" / "Pulumi.dev.yaml"
    head.parent.mkdir()
    text = (STACKS / "Pulumi.dev.yaml").read_text()
    assert "    nodes: 1\n" in text
    # 2 nodes share a cluster placement group: one zone (rule aws-placement-group-one-zone)
    head.write_text(text.replace("    nodes: 1\n", "    nodes: 2\n").replace("[use1-az1, use1-az2, use1-az4]", "[use1-az2]"))
    return head


@pytest.mark.parametrize("width", [80, 200])
def test_diff_table_fits(width, head_stack, capsys, monkeypatch, tmp_path):
    args = ["diff", "--base", str(STACKS / "Pulumi.dev.yaml"), "--head", str(head_stack)]
    data = json.loads(run(capsys, monkeypatch, tmp_path, 200, *args, "--format", "json"))
    assert any(r["op"] != "same" for r in data["resources"])
    check(run(capsys, monkeypatch, tmp_path, width, *args), width, diff_ids(data, width))


def test_narrow_tables_name_what_wide_adds_and_wide_shows_it(capsys, monkeypatch, tmp_path):
    args = ["plan", "--model", "llama-7b", "--tokens", "200B"]
    narrow = run(capsys, monkeypatch, tmp_path, 80, *args)
    adds = [part.splitlines()[0] for part in narrow.split("--wide adds:")[1:]]  # one line per narrowed table
    assert any("setup" in line for line in adds) and any("data stalls" in line for line in adds)
    data = as_json(capsys, monkeypatch, tmp_path, *args)
    wide = run(capsys, monkeypatch, tmp_path, 80, *args, "--wide")
    assert "--wide adds" not in wide
    plans = [data["best"], *data["alternatives"], *data["frontier"]]
    lines = wide.splitlines()
    for p in plans:  # every column, one line per plan, even past the 80 columns asked for
        assert any(p["instance_type"] in line and p["interruption"] in line and ",".join(p["zones"]) in line
                   for line in lines), p["instance_type"]  # fmt: skip


def test_preview_lists_each_price_source_once_under_the_table(capsys, monkeypatch, tmp_path):
    est = as_json(capsys, monkeypatch, tmp_path, "preview", "-s", "dev")
    out = run(capsys, monkeypatch, tmp_path, 80, "preview", "-s", "dev")
    table_part, notes_part = out.split("\nsources:\n")
    numbers = re.findall(r"^\s*\[(\d+)\] ", notes_part, re.MULTILINE)
    components = [c for r in est["resources"] for c in r["components"]]
    assert numbers == [str(n) for n in range(1, len({(c["source"], c["note"]) for c in components}) + 1)]
    assert all(c["source"] in notes_part for c in components)
    assert all(f"[{n}]" in table_part for n in numbers)  # every note is referenced from a row
    assert "(rate:" not in table_part and "(catalog:" not in table_part  # provenance is not inline any more


def test_the_fold_check_finds_what_the_old_tables_did():
    """The check above is not vacuous: a Rich table with overflow="fold" at 80 columns, as before."""
    console = Console(width=40, record=True, file=io.StringIO())
    t = Table(title="Runners-up")
    for header in ("nodes x instance", "where", "interruption", "expected cost"):
        t.add_column(header, overflow="fold")
    t.add_row("12 x p4d.24xlarge", "aws us-east-1", "10-15%/month", "$4,038.21")
    console.print(t)
    lines = console.export_text().splitlines()
    assert folded(lines, "p4d.24xlarge") or folded(lines, "us-east-1") or folded(lines, "interruption")


def test_width_follows_columns_set_after_import(capsys, monkeypatch, tmp_path):
    """$COLUMNS is read at print time, not frozen when cli.output was first imported."""
    for width in (60, 120):
        out = run(capsys, monkeypatch, tmp_path, width, "catalog", "list", "--cloud", "aws")
        rule = next(line for line in out.splitlines() if set(line.strip()) == {"─"})
        assert cell_len(rule) <= width
        assert width == 60 or cell_len(rule) > 80
