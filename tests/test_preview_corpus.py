"""Price every third-party `pulumi preview --json` document in tests/fixtures/preview/corpus (issue 17).

The corpus is documents other projects wrote and committed, vendored byte for byte; PROVENANCE.md beside
them names each one's repository, path, commit and licence. Each is priced the way a user prices one:

    trainfleet preview --pulumi-json FILE --json

and the answer is held to the rules every document must meet, whatever its provider or shape: exit 0 and
strict JSON (no NaN/Infinity); a $0 resource is "free" and says why; a resource that is not priced or not
estimable says why; a "priced" resource has a number; and no step is dropped on the way (one diff row per
distinct step URN, the root stack aside).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.preview.model import FREE, NOT_ESTIMABLE, NOT_PRICED, PRICED
from tests.conftest import assert_one_line_error

CORPUS = Path(__file__).parent / "fixtures" / "preview" / "corpus"
PROVENANCE = CORPUS / "PROVENANCE.md"
DOCUMENTS = sorted(CORPUS.glob("*.json"))
VENDORED = 15  # the number of documents vendored with PROVENANCE.md; fewer means the folder went missing
ROOT_STACK = "pulumi:pulumi:Stack"


def _refuse_constant(name: str):
    raise ValueError(f"the CLI printed {name}, which is not JSON")


def strict_json(text: str):
    return json.loads(text, parse_constant=_refuse_constant)


def _type_of(urn: str) -> str:
    """urn:pulumi:STACK::PROJECT::parent$type::name -> type."""
    parts = urn.split("::")
    return parts[2].split("$")[-1] if len(parts) >= 4 else ""


def step_urns(doc: dict) -> set[str]:
    """Every distinct URN the document's steps name, the root stack aside."""
    return {
        s["urn"]
        for s in doc["steps"]
        if isinstance(s, dict) and isinstance(s.get("urn"), str) and _type_of(s["urn"]) != ROOT_STACK
    }


def is_preview(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("steps"), list)


def test_the_corpus_is_there():
    assert CORPUS.is_dir(), f"{CORPUS} is missing"
    assert len(DOCUMENTS) >= VENDORED, [p.name for p in DOCUMENTS]


def test_every_document_has_its_provenance():
    text = PROVENANCE.read_text()
    missing = [p.name for p in DOCUMENTS if f"`{p.name}`" not in text]
    assert not missing, f"no PROVENANCE.md row for {missing}"


@pytest.mark.parametrize("path", DOCUMENTS, ids=[p.stem for p in DOCUMENTS])
def test_corpus_document_prices(path, trainfleet):
    doc = json.loads(path.read_text())
    result = trainfleet("preview", "--pulumi-json", str(path), "--json")
    if not is_preview(doc):  # genuinely not a preview: one clear line, nothing else
        assert_one_line_error(result, path.name)
        return
    assert result.code == 0, (result.code, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    out = strict_json(result.stdout)

    problems = []
    for r in out["estimate"]["resources"]:
        who = f"estimate {r['type']} {r['name']!r} ({r['status']}, {r['monthly_cost']})"
        if r["monthly_cost"] == 0 and (r["status"] != FREE or not r["reason"].strip()):
            problems.append(f"{who}: costs $0 but is not 'free' with a reason")
        if r["status"] in (NOT_PRICED, NOT_ESTIMABLE) and not r["reason"].strip():
            problems.append(f"{who}: no reason")
        if r["status"] == PRICED and r["monthly_cost"] is None:
            problems.append(f"{who}: priced, but monthly_cost is null")
    for r in out["diff"]["resources"]:
        who = f"diff {r['op']} {r['type']} {r['name']!r} ({r['status']})"
        if r["status"] in (NOT_PRICED, NOT_ESTIMABLE) and not r["reason"].strip():
            problems.append(f"{who}: no reason")
        if r["status"] == PRICED and r["head_monthly_cost"] is None:
            problems.append(f"{who}: priced, but head_monthly_cost is null")
    assert not problems, "\n".join(problems)

    # No step is silently dropped: one row per distinct URN the steps name, the root stack aside.
    expected = step_urns(doc)
    rows = [r["urn"] for r in out["diff"]["resources"]]
    assert set(rows) == expected, {
        "dropped": sorted(expected - set(rows)),
        "invented": sorted(set(rows) - expected),
    }
    assert len(rows) == len(expected), sorted(u for u in rows if rows.count(u) > 1)
