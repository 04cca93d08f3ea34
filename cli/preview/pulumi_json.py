"""Price a real `pulumi preview --json` document, op by op.

The document is Pulumi's preview digest: `steps[]`, each with `op`, `urn` and the resource's
`oldState` / `newState` (`{type, inputs, outputs, parent, custom, id}`), plus `config` and
`changeSummary`. Per step:

    create                      costs its newState from now on      (before: none)
    delete                      stops costing its oldState          (after: none)
    update, replace             oldState before, newState after
    same, refresh, import       cost the same before and after
    read, discard               an existing resource the stack reads (`Resource.get`), not manages: free to it

A step that names a resource but carries no state (some tools write `op` and `urn` only) is still a
resource: free if its type is, else "not estimable", never dropped. Without `--show-sames` the document
leaves unchanged resources out; `changeSummary` still counts them (`absent_unchanged`), so totals are
never presented as the whole stack, and a diff completes them from the other document's deployed state.

`--show-replacement-steps` splits a replace into create-replacement + delete-replaced; both halves are
folded back into one replace per URN. A secret (`[secret]`) or a value unknown until apply that a
price depends on makes that resource "not estimable"; it is never counted as $0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cli.preview.model import Estimate, Resource, UsageValue
from infra.config import Fleet
from infra.errors import TrainfleetError

BEFORE_ONLY = {"delete", "delete-replaced", "remove-pending-replace"}
AFTER_ONLY = {"create", "create-replacement"}
BOTH_CHANGED = {"update", "replace"}
BOTH_SAME = {"same", "refresh", "import", "import-replacement"}
# Resources read with `Resource.get` (pulumi's ReadStep) and reads dropped from the program (discard):
# they exist in the cloud but this stack neither creates nor pays for them.
EXTERNAL = {"read", "read-replacement", "discard", "discard-replaced"}
KNOWN_OPS = BEFORE_ONLY | AFTER_ONLY | BOTH_CHANGED | BOTH_SAME | EXTERNAL


class PreviewJsonError(TrainfleetError):
    """The file is not a `pulumi preview --json` document."""


@dataclass
class Step:
    op: str  # the logical op: create, delete, update, replace, same
    urn: str
    before: Resource | None
    after: Resource | None
    diff_keys: list[str]


def _type_and_name(urn: str) -> tuple[str, str]:
    """urn:pulumi:STACK::PROJECT::parent$type::name -> (type, name)."""
    parts = urn.split("::")
    if len(parts) < 4:
        return "", urn
    return parts[2].split("$")[-1], "::".join(parts[3:])


def _resource(urn: str, state: dict[str, Any] | None, provider: str = "") -> Resource | None:
    if not isinstance(state, dict):
        return None
    type_, name = _type_and_name(urn)
    inputs = state.get("inputs") if isinstance(state.get("inputs"), dict) else {}
    outputs = state.get("outputs") if isinstance(state.get("outputs"), dict) else {}
    return Resource(
        type=str(state.get("type") or type_),
        name=name,
        urn=urn,
        parent=str(state.get("parent") or ""),
        inputs={k: v for k, v in inputs.items() if not str(k).startswith("__")},
        outputs={k: v for k, v in outputs.items() if not str(k).startswith("__")},
        id=str(state.get("id") or ""),
        custom=bool(state.get("custom", True)),
        provider=str(state.get("provider") or provider or ""),
    )


def _stateless(urn: str, provider: str) -> Resource:
    """A resource a step names without any state: its type and name from the URN, nothing to price it by."""
    type_, name = _type_and_name(urn)
    return Resource(type=type_, name=name, urn=urn, provider=provider, has_state=False)


def load_document(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise PreviewJsonError(f"preview JSON {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PreviewJsonError(f"preview JSON {path} cannot be read ({exc})") from None
    return parse_document(text, str(path))


# Pulumi's documents nest a resource's inputs a few levels deep; far deeper is a broken or hostile file,
# refused before anything recurses over it (json itself gives up near 1,000 levels with a RecursionError).
MAX_DEPTH = 200


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _NonFinite(ValueError):
    """NaN, Infinity or a number too large for a double: JSON has none (RFC 8259 section 6), and Go's
    encoding/json, which writes `pulumi preview --json`, refuses to encode them."""


def _no_non_finite_constant(name: str) -> float:
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NonFinite(text[:40])
    return value


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                todo.extend((v, level + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def parse_document(text: str, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_non_finite_constant,
            parse_float=_finite_float,
        )
    except _NonFinite as exc:
        raise PreviewJsonError(
            f"{where} holds the number {exc}, which JSON and `pulumi preview --json` never write; "
            "produce the file with `pulumi preview --json > FILE`"
        ) from None
    except json.JSONDecodeError as exc:
        raise PreviewJsonError(
            f"{where} is not JSON (line {exc.lineno}: {exc.msg}); produce it with `pulumi preview --json > FILE`"
        ) from None
    except _DuplicateKey as exc:
        raise PreviewJsonError(
            f"{where}: key {exc.key[:60]!r} appears twice in one object (JSON readers disagree on which wins); "
            "produce the file with `pulumi preview --json > FILE`"
        ) from None
    except RecursionError:
        doc = None
    if doc is None or _depth(doc) > MAX_DEPTH:
        if doc is None and text.strip() == "null":
            raise PreviewJsonError(
                f"{where} is not a `pulumi preview --json` document: expected an object with `steps`"
            )
        raise PreviewJsonError(
            f"{where} is nested more than {MAX_DEPTH} levels deep; a `pulumi preview --json` document is a "
            "few levels deep, produce it with `pulumi preview --json > FILE`"
        )
    if not isinstance(doc, dict) or not isinstance(doc.get("steps", []), list):
        raise PreviewJsonError(
            f"{where} is not a `pulumi preview --json` document: expected an object with `steps`"
        )
    if "steps" not in doc and not doc.get("changeSummary"):
        raise PreviewJsonError(f"{where} has no `steps`; produce it with `pulumi preview --json > FILE`")
    return doc


def steps(doc: dict[str, Any], where: str = "preview JSON") -> list[Step]:
    """The document's steps, one per URN, folded into logical ops."""
    by_urn: dict[str, Step] = {}
    order: list[str] = []
    for n, raw in enumerate(doc.get("steps") or []):
        if (
            not isinstance(raw, dict)
            or not isinstance(raw.get("urn"), str)
            or not isinstance(raw.get("op"), str)
        ):
            raise PreviewJsonError(f"{where}: steps[{n}] has no `op` and `urn`")
        op, urn = raw["op"], raw["urn"]
        if op not in KNOWN_OPS:
            raise PreviewJsonError(
                f"{where}: steps[{n}] has op {op!r}; known ops: {', '.join(sorted(KNOWN_OPS))}"
            )
        provider = raw.get("provider") if isinstance(raw.get("provider"), str) else ""
        old = _resource(urn, raw.get("oldState"), provider)
        new = _resource(urn, raw.get("newState"), provider)
        keys = [str(k) for k in (raw.get("replaceReasons") or raw.get("diffReasons") or [])]
        if op in BEFORE_ONLY:
            before, after, logical = old or new or _stateless(urn, provider), None, "delete"
        elif op in AFTER_ONLY:
            before, after, logical = None, new or _stateless(urn, provider), "create"
        elif op in BOTH_CHANGED:
            before, after, logical = old or _stateless(urn, provider), new or _stateless(urn, provider), op
            if op == "update" and old is not None and new is not None:
                # an update keeps the resource, so what the cloud reported (its region, its id) stands until
                # apply says otherwise; a preview's newState often has no outputs at all
                after = replace(new, outputs={**old.outputs, **new.outputs}, id=new.id or old.id)
        elif op in EXTERNAL:
            before = after = replace(new or old or _stateless(urn, provider), managed=False)
            logical = "read"
        else:
            before = after = new or old or _stateless(urn, provider)
            logical = "same"
        if urn in by_urn:  # the other half of a split replacement
            prior = by_urn[urn]
            prior.before = _with_state(prior.before, before)
            prior.after = _with_state(prior.after, after)
            prior.op = "replace"
            prior.diff_keys = prior.diff_keys or keys
            continue
        by_urn[urn] = Step(logical, urn, before, after, keys)
        order.append(urn)
    return [by_urn[u] for u in order if u.split("::")[2:3] != ["pulumi:pulumi:Stack"]]


def _with_state(mine: Resource | None, other: Resource | None) -> Resource | None:
    """Of two halves' views of one side of a replacement, the one that carries a state."""
    if mine is None or (not mine.has_state and other is not None):
        return other
    return mine


def absent_unchanged(doc: dict[str, Any]) -> int:
    """How many unchanged resources the document leaves out: `changeSummary` counts every `same`, the
    steps hold them only with `--show-sames` (pulumi pkg/backend/display/json.go, `shouldShow`)."""
    summary = doc.get("changeSummary") if isinstance(doc.get("changeSummary"), dict) else {}
    counted = summary.get("same", 0)
    if not isinstance(counted, int) or isinstance(counted, bool):
        return 0
    listed = sum(1 for s in doc.get("steps") or [] if isinstance(s, dict) and s.get("op") == "same")
    return max(0, counted - listed)


def deployed(all_steps: list[Step]) -> dict[str, Resource]:
    """URN -> the resource as deployed before the update (every step's before-side)."""
    return {s.urn: s.before for s in all_steps if s.before is not None}


def complete_from(all_steps: list[Step], other: list[Step]) -> tuple[list[Step], int]:
    """`all_steps` of one document, plus every resource the other document proves deployed that this one
    does not name, as unchanged; and how many were added.

    Steps are read by their meaning: an update, replace, delete or same step (any step with an old state)
    proves the resource exists in the deployed stack. Both previews run against that same stack, so a
    resource one document leaves out (written without `--show-sames`, or by a tool that lists only changes)
    is one its program leaves as it is, never one it adds."""
    listed = {s.urn for s in all_steps}
    added = [Step("same", urn, res, res, []) for urn, res in deployed(other).items() if urn not in listed]
    return all_steps + added, len(added)


def still_absent(absent: int, completed: int) -> int:
    """Unchanged resources a document leaves out that the other did not name either: the totals of that side
    do not include them. changeSummary may or may not count the root stack's own `same`, so one is allowed."""
    left = absent - completed
    return left if left > 1 else 0


def regions_from_config(doc: dict[str, Any]) -> dict[str, str]:
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    out = {}
    for cloud, key in (("aws", "aws:region"), ("gcp", "gcp:region"), ("azure", "azure-native:location")):
        value = config.get(key)
        if isinstance(value, str) and value and value != "[secret]":
            out[cloud] = value
    return out


@dataclass
class PricedPreview:
    """A preview document priced twice: the resources as they are (before) and as they will be (after)."""

    where: str
    steps: list[Step]
    before: Estimate
    after: Estimate

    @property
    def ops(self) -> dict[str, str]:
        return {s.urn: s.op for s in self.steps}


def price_document(
    doc: dict[str, Any],
    where: str,
    usage: dict[str, UsageValue],
    stack: str | None = None,
    regions: dict[str, str] | None = None,
    all_steps: list[Step] | None = None,
    absent: int | None = None,
    fleets: dict[str, Fleet] | None = None,
) -> PricedPreview:
    """Price a document's before and after states. `all_steps` replaces the document's own steps when a
    diff has completed them from the other document, with `absent` the unchanged resources still missing;
    otherwise every unchanged resource the document leaves out is counted as `absent` on both estimates.
    `fleets` (the stack config the document was previewed with) sizes the after side's fleets."""
    from cli.preview.pricing import PricingContext, price_all
    from infra.catalog import default_catalog

    if absent is None:
        absent = 0 if all_steps is not None else absent_unchanged(doc)
    all_steps = all_steps if all_steps is not None else steps(doc, where)
    regions = {**regions_from_config(doc), **(regions or {})}
    catalog = default_catalog()
    name = stack or _stack_from_urns(all_steps) or Path(where).stem
    origin = f"pulumi preview --json ({where})"

    def estimate(resources: list[Resource], label: str, fleets: dict[str, Fleet]) -> Estimate:
        priced = price_all(resources, PricingContext(catalog, usage, resources, regions, fleets))
        return Estimate(name, label, priced, usage, absent=absent)

    # the before side is the deployed stack, whose config the document does not carry: its groups' sizes
    return PricedPreview(
        where,
        all_steps,
        estimate([s.before for s in all_steps if s.before is not None], origin + " before", {}),
        estimate([s.after for s in all_steps if s.after is not None], origin, fleets or {}),
    )


def _stack_from_urns(all_steps: list[Step]) -> str:
    for s in all_steps:
        parts = s.urn.split(":", 3)
        if len(parts) == 4 and parts[0] == "urn" and parts[1] == "pulumi":
            return parts[2].split("::")[0]
    return ""


def price_file(
    path: Path, usage: dict[str, UsageValue], stack: str | None = None, regions=None
) -> PricedPreview:
    return price_document(load_document(path), str(path), usage, stack, regions)
