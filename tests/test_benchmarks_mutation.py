"""benchmarks/mutation.py, the mutation-score tool, on a throwaway module in tmp_path (not a mutation run of
the product, which is slow and not part of the suite).

The throwaway repository and its mutant table are written below, so every expected count and line number
is read off them by hand: `total` is tested, `discount`'s boundary at 100 is not, a snippet that is not in
the file is stale, one that occurs twice is ambiguous."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

MUTATION = runpy.run_path(str(REPO / "benchmarks" / "mutation.py"), run_name="mutation_under_test")

SHOP = """\
def total(prices, quantities):
    return sum(p * q for p, q in zip(prices, quantities, strict=True))


def discount(amount):
    if amount >= 100:
        return amount * 0.9
    return amount
"""

# Tests `total` fully; `discount` only far from its boundary, so moving the boundary goes unnoticed.
# WITNESS: a file outside the repository where each test run notes its process id and which shop.py it
# imported.
TEST_SHOP = """\
import os

import shop
from shop import discount, total

with open(WITNESS, "a") as witness:
    witness.write(f"{os.getpid()} {shop.__file__}\\n")


def test_total():
    assert total([2.0, 3.0], [1, 4]) == 14.0


def test_discount_far_from_the_boundary():
    assert discount(200) == 180.0
    assert discount(50) == 50
"""

TABLE = """\
MODULE = "shop"
TESTS = ["tests/test_shop.py"]
MUTANTS = [
    {"file": "shop.py", "bug": "quantities are added to prices", "original": "p * q", "replacement": "p + q"},
    {"file": "shop.py", "bug": "an order of exactly 100 gets no discount",
     "original": "if amount >= 100:", "replacement": "if amount > 100:"},
    {"file": "shop.py", "bug": "a snippet someone already rewrote", "original": "amount * 0.5", "replacement": "0"},
    {"file": "shop.py", "bug": "a snippet that occurs twice", "original": "return amount", "replacement": "return 0"},
    {"file": "shop.py", "bug": "discount never returns",
     "original": "def discount(amount):\\n", "replacement": "def discount(amount):\\n    while True:\\n        pass\\n"},
]
"""


def make_repo(tmp_path: Path, test_text: str = TEST_SHOP, table: str = TABLE) -> tuple[Path, Path]:
    repo, tables = tmp_path / "repo", tmp_path / "tables"
    (repo / "tests").mkdir(parents=True)
    tables.mkdir()
    (repo / "shop.py").write_text(SHOP)
    witness = f"WITNESS = {str(tmp_path / 'imported.txt')!r}\n"
    (repo / "tests" / "test_shop.py").write_text(witness + test_text)
    (tables / "shop.py").write_text(table)
    return repo, tables


def run_tool(repo: Path, tables: Path, *args: str) -> int:
    return MUTATION["main"](["--root", str(repo), "--tables", str(tables), "--python", sys.executable, *args])


def witnessed(tmp_path: Path) -> list[tuple[int, str]]:
    """(pid, shop.py imported) of each test run in the throwaway repository."""
    lines = (tmp_path / "imported.txt").read_text().splitlines()
    return [(int(pid), path) for pid, path in (line.split(" ", 1) for line in lines)]


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_scores_killed_and_survivor_lists_stale_and_ambiguous_and_never_touches_the_tree(tmp_path, capsys):
    repo, tables = make_repo(tmp_path)
    before = snapshot(repo)
    code = run_tool(repo, tables, "--jobs", "2", "--mutant", "shop#1", "--mutant", "shop#2",
                    "--mutant", "shop#3", "--mutant", "shop#4")  # fmt: skip
    out = capsys.readouterr().out
    assert "shop: killed 1/2 (50%); 2 not scored (stale, ambiguous or error)" in out, out
    # the survivor names where the missing test belongs: shop.py line 6 is `if amount >= 100:`
    assert "survivor  shop.py:6  an order of exactly 100 gets no discount  [shop#2]" in out, out
    assert "STALE" in out and "[shop#3]" in out
    assert "AMBIGUOUS" in out and "[shop#4]" in out
    assert code == 1, "stale or ambiguous entries make the exit status 1"
    assert snapshot(repo) == before, "the working tree must never be modified"
    imported = [path for _, path in witnessed(tmp_path)]
    assert len(imported) >= 3, imported  # the baseline and two mutants (the canary fails on import)
    assert all(Path(p).name == "shop.py" and not Path(p).is_relative_to(repo) for p in imported), (
        "the tests must import a private copy of shop.py, never the working tree's",
        imported,
    )


def test_a_mutant_that_hangs_is_killed_by_timeout(tmp_path, capsys):
    repo, tables = make_repo(tmp_path)
    code = run_tool(repo, tables, "--mutant", "shop#5", "--timeout", "5")
    out = capsys.readouterr().out
    assert "shop: killed 1/1 (100%), 1 by timeout" in out, out
    assert code == 0
    hung = witnessed(tmp_path)[-1][0]
    assert not running(hung), f"the hung pytest (pid {hung}) must be ended, not left spinning"
    assert (repo / "shop.py").read_text() == SHOP


def test_failing_tests_without_any_mutant_stop_the_run(tmp_path, capsys):
    repo, tables = make_repo(tmp_path, test_text=TEST_SHOP + "\n\ndef test_broken():\n    assert False\n")
    assert run_tool(repo, tables, "--mutant", "shop#1") == 2
    err = capsys.readouterr().err
    assert "the unmutated copy fails its tests" in err and "tests/test_shop.py" in err, err


def test_tests_that_never_import_the_copy_stop_the_run(tmp_path, capsys):
    """The canary (the file raising on import) must fail the tests; here they never import shop.py."""
    repo, tables = make_repo(tmp_path, test_text="def test_nothing():\n    assert True\n")
    assert run_tool(repo, tables, "--mutant", "shop#1") == 2
    assert "canary survived" in capsys.readouterr().err


def test_a_mutated_file_imported_from_elsewhere_stops_the_run(tmp_path, capsys):
    """A module already loaded from another place (here the standard library's os) is not the copy's file:
    the import check refuses to score it."""
    table = 'TESTS = ["tests/test_shop.py"]\nMUTANTS = [{"file": "os.py", "bug": "b", "original": "x", "replacement": "y"}]\n'
    repo, tables = make_repo(tmp_path, table=table)
    (repo / "os.py").write_text("x = 1\n")
    assert run_tool(repo, tables) == 2
    err = capsys.readouterr().err
    assert "os imports from" in err and "not from the copy" in err, err


def test_list_checks_snippets_without_running_anything(tmp_path, capsys):
    repo, tables = make_repo(tmp_path)
    assert run_tool(repo, tables, "--list") == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("shop#2") and "shop.py:6" in line for line in lines), lines
    assert any(line.startswith("shop#3") and line.endswith("<-- STALE") for line in lines), lines
    assert any(line.startswith("shop#4") and line.endswith("<-- AMBIGUOUS") for line in lines), lines
    assert lines[-1] == "5 mutants in 1 modules; 2 stale or ambiguous"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (
            '{"file": "shop.py", "bug": "b", "original": "p * q", "replacement": "p * q"}',
            "equals the original",
        ),
        ('{"file": "shop.py", "original": "p * q", "replacement": "p + q"}', "missing bug"),
    ],
)
def test_a_malformed_table_is_refused(tmp_path, capsys, spec, needle):
    repo, tables = make_repo(tmp_path, table=f'TESTS = ["tests/test_shop.py"]\nMUTANTS = [{spec}]\n')
    assert run_tool(repo, tables, "--list") == 2
    assert needle in capsys.readouterr().err


def test_the_product_tables_name_files_and_tests_that_exist():
    """Every product mutant names a file and tests that exist, and its snippet occurs exactly once: a stale one
    plants nothing and is not scored, so a change that moves a snippet updates its table in the same commit
    (`benchmarks/mutation.py --list` shows where each is). Fourteen had gone stale unnoticed before this held."""
    mutants = MUTATION["load_tables"](REPO / "benchmarks" / "mutations")
    modules = {m.module for m in mutants}
    assert len(modules) >= 7
    for module in modules:
        assert sum(m.module == module for m in mutants) >= 10, module
    for m in mutants:
        assert (REPO / m.file).is_file(), m.id
        for test in m.tests:
            assert (REPO / test.split("::")[0]).is_file(), (m.id, test)
        status, _ = MUTATION["locate"]((REPO / m.file).read_text(), m.original)
        assert status == "OK", f"{m.id}: its snippet is {status} in {m.file}: {m.original[:80]!r}"


def test_a_device_that_changed_during_a_run_stops_everything():
    """Tests run as root and write to /dev/full: a mutant that replaces it must stop the run. Simulated by
    a recorded state in which /dev/full was absent (the real device is never touched)."""
    now = MUTATION["device_state"]()
    MUTATION["check_devices"](now, "an unchanged machine")
    with pytest.raises(MUTATION["MutationError"], match=r"mutant x changed /dev/full .*mknod"):
        MUTATION["check_devices"]({**now, "/dev/full": None}, "mutant x")
