"""Cost and infrastructure diff between two estimates (two stack files, a git ref and the working tree,
or two `pulumi preview --json` documents).

Resources are matched by URN. Each row carries the base and head monthly cost, the delta (None when
either side is unknown: a delta is never guessed), the op (create, delete, update, replace, same)
and, for changed resources, the input paths that changed.
"""

from __future__ import annotations

import posixpath
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.preview.model import (
    NOT_PRICED,
    PRICED,
    Estimate,
    FleetExpectation,
    PricedResource,
    _round,
    money_round,
)
from cli.preview.pricing.base import UNKNOWN
from infra.errors import TrainfleetError

if TYPE_CHECKING:
    from cli.preview.usage import UsageFile
    from infra.config import StackConfig

MAX_VALUE_CHARS = 80


@dataclass
class InputChange:
    path: str
    base: Any
    head: Any

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "base": self.base, "head": self.head}


@dataclass
class DiffRow:
    urn: str
    type: str
    name: str
    op: str  # create, delete, update, replace, same
    base: PricedResource | None
    head: PricedResource | None
    changes: list[InputChange] = field(default_factory=list)

    @property
    def base_monthly(self) -> float | None:
        return 0.0 if self.base is None else self.base.monthly_cost

    @property
    def head_monthly(self) -> float | None:
        return 0.0 if self.head is None else self.head.monthly_cost

    @property
    def delta(self) -> float | None:
        b, h = self.base_monthly, self.head_monthly
        return None if b is None or h is None else h - b

    @property
    def list_job_delta(self) -> float | None:
        """The change of the resource's cost over `job_hours` at list price (no interruption)."""
        b = 0.0 if self.base is None else self.base.job_cost
        h = 0.0 if self.head is None else self.head.job_cost
        return None if b is None or h is None else h - b

    @property
    def status(self) -> str:
        """priced / free / not priced / not estimable, from whichever side exists (head first)."""
        side = self.head or self.base
        return side.status if side else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "op": self.op,
            "status": self.status,
            "base_monthly_cost": _round(self.base_monthly),
            "head_monthly_cost": _round(self.head_monthly),
            "monthly_delta": _round(self.delta),
            "list_job_delta": _round(self.list_job_delta),
            "reason": (self.head or self.base).reason if (self.head or self.base) else "",
            "changed_inputs": [c.to_json() for c in self.changes],
        }


@dataclass(frozen=True)
class ExpectedChange:
    """One fleet's expected job cost with interruptions, base and head (None where the side has no such fleet,
    or the model could not assess it there)."""

    fleet: str
    base: FleetExpectation | None
    head: FleetExpectation | None

    @property
    def delta(self) -> float | None:
        """head - base; a fleet only one side has counts as $0 on the other; None when neither has it."""
        if self.base is None and self.head is None:
            return None
        return cents_delta(_job_usd(self.base), _job_usd(self.head))

    def to_json(self) -> dict[str, Any]:
        def side(e: FleetExpectation | None) -> dict[str, Any] | None:
            if e is None:
                return None
            return {
                "expected_job_usd": money_round(e.expected_job_usd),
                "wall_hours": _round(e.wall_hours, 1),
                "list_job_usd": money_round(e.list_job_usd),
                "ideal_hours": _round(e.ideal_hours, 1),
                "expected_interruptions": _round(e.interruptions, 1),
                # the planner gives no interval for a whole run yet: said, never invented
                "range_80": None,
            }

        return {
            "fleet": self.fleet,
            "base": side(self.base),
            "head": side(self.head),
            "delta_usd": money_round(self.delta),
        }


def cents_delta(base: float, head: float) -> float:
    """head - base as the two figures are shown (each rounded to the cent first), so the change a reader
    checks by subtracting the shown figures is the change shown."""
    return money_round(money_round(head) - money_round(base))  # type: ignore[operator,return-value]


def _job_usd(e: FleetExpectation | None) -> float:
    return 0.0 if e is None else money_round(e.expected_job_usd)  # type: ignore[return-value]


@dataclass
class CostDiff:
    stack: str
    base_label: str
    head_label: str
    base: Estimate
    head: Estimate
    rows: list[DiffRow]

    @property
    def monthly_delta(self) -> float:
        return self.head.monthly_total - self.base.monthly_total

    @property
    def list_job_delta(self) -> float:
        return self.head.job_total - self.base.job_total

    def expected_changes(self) -> list[ExpectedChange]:
        """Per fleet, base and head expected job cost: the head's fleets in order, then those only the base has."""
        base = {e.fleet: e for e in self.base.expected}
        head = {e.fleet: e for e in self.head.expected}
        names = list(head) + [n for n in base if n not in head]
        return [ExpectedChange(n, base.get(n), head.get(n)) for n in names]

    @staticmethod
    def expected_total(est: Estimate) -> float | None:
        """A side's expected job cost, all fleets: the sum of the per-fleet figures as shown; None when no
        fleet could be assessed."""
        return money_round(sum(_job_usd(e) for e in est.expected)) if est.expected else None

    @property
    def expected_delta(self) -> float | None:
        """The change of the expected job cost, all fleets; None unless both sides have an expectation."""
        b, h = self.expected_total(self.base), self.expected_total(self.head)
        return None if b is None or h is None else cents_delta(b, h)

    def expected_summary(self) -> dict[str, Any]:
        """The expected job cost with interruptions, base -> head, total and per fleet (JSON)."""
        return {
            "base": self.expected_total(self.base),
            "head": self.expected_total(self.head),
            "delta": self.expected_delta,
            "fleets": [c.to_json() for c in self.expected_changes()],
            "note": "; ".join(n for n in (self.head.expected_note, self.base.expected_note) if n),
        }

    def _base_head(self, figure) -> dict[str, float | None]:
        b, h = figure(self.base), figure(self.head)
        return {"base": money_round(b), "head": money_round(h), "delta": cents_delta(b, h)}

    def list_job_summary(self) -> dict[str, Any]:
        """Every resource at list price over the usage figure `job_hours` (no interruption, no restart)."""
        hours = self.head.usage.get("job_hours")
        return {
            "base": money_round(self.base.job_total),
            "head": money_round(self.head.job_total),
            "delta": cents_delta(self.base.job_total, self.head.job_total),
            "job_hours": hours.value if hours else None,
            "job_hours_source": hours.source if hours else "",
        }

    def count(self, op: str) -> int:
        return sum(1 for r in self.rows if r.op == op)

    @property
    def changed_rows(self) -> list[DiffRow]:
        return [r for r in self.rows if r.op != "same"]

    @property
    def unknown_rows(self) -> list[DiffRow]:
        return [r for r in self.rows if r.op != "same" and r.delta is None]

    def summary(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "base": self.base_label,
            "head": self.head_label,
            "currency": "USD",
            # the monthly run-rate: every resource at list price for a month (730 h)
            "base_monthly_cost": money_round(self.base.monthly_total),
            "head_monthly_cost": money_round(self.head.monthly_total),
            "monthly_delta": cents_delta(self.base.monthly_total, self.head.monthly_total),
            # the planned job with interruptions, per fleet (the planner's reliability model)
            "expected_job_usd": self.expected_summary(),
            # every resource at list price over the usage figure job_hours, nothing lost
            "list_job_usd": self.list_job_summary(),
            # the monthly run-rate split: what follows from the resources, and what rests on usage figures
            "fixed_monthly": self._base_head(lambda e: e.fixed_total),
            "usage_based_monthly": self._base_head(lambda e: e.usage_based_total),
            "depends_on_usage": [
                {"name": c.name, "unit": c.unit, "unit_price": c.unit_price, "usage_keys": list(c.usage_keys)}
                for c in self.head.depends_on_usage()
            ],
            "added": self.count("create"),
            "removed": self.count("delete"),
            "changed": self.count("update"),
            "replaced": self.count("replace"),
            "unchanged": self.count("same"),
            "not_priced_changes": sum(1 for r in self.unknown_rows if r.status == NOT_PRICED),
            "not_estimable_changes": sum(1 for r in self.unknown_rows if r.status != NOT_PRICED),
            "complete": self.base.complete and self.head.complete,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "resources": [r.to_json() for r in self.rows],
            "usage": {k: v.to_json() for k, v in self.head.usage.items()},
        }


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': [1]}} -> {'a.b[0]': 1}; empty containers kept as leaves."""
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for k, v in value.items():
            if str(k).startswith("__"):
                continue
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
    elif value == UNKNOWN:
        out[prefix] = "(known after apply)"
    elif isinstance(value, float) and value.is_integer():
        out[prefix] = int(value)  # protobuf numbers arrive as floats: 2.0 is the 2 the program wrote
    else:
        out[prefix] = value
    return out


def input_changes(base: dict[str, Any], head: dict[str, Any]) -> list[InputChange]:
    a, b = flatten(base), flatten(head)
    return [InputChange(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def diff_estimates(
    base: Estimate,
    head: Estimate,
    base_label: str,
    head_label: str,
    ops: dict[str, str] | None = None,
) -> CostDiff:
    """Match by URN; `ops` (from a preview document) overrides the op worked out from inputs."""
    base_by = {r.resource.urn: r for r in base.resources}
    head_by = {r.resource.urn: r for r in head.resources}
    # sorted, not in registration order: the mock engine may register resources created in apply callbacks
    # in another order on another run, and the comment must be the same bytes for the same stacks
    urns = sorted(head_by) + sorted(u for u in base_by if u not in head_by)
    rows = []
    for urn in urns:
        b, h = base_by.get(urn), head_by.get(urn)
        res = (h or b).resource  # type: ignore[union-attr]
        changes = input_changes(b.resource.inputs, h.resource.inputs) if b and h else []
        if ops and urn in ops:
            op = ops[urn]
        elif b is None:
            op = "create"
        elif h is None:
            op = "delete"
        else:
            op = "update" if changes else "same"
        rows.append(DiffRow(urn, res.type, res.name, op, b, h, changes))
    return CostDiff(head.stack or base.stack, base_label, head_label, base, head, rows)


# ---- where the two sides come from ------------------------------------------------------------


MAX_SYMLINK_HOPS = 8


def git_show(ref: str, path: Path) -> str | None:
    """The text of `path` at git ref `ref` (`git show REF:path`); None when the ref has no such file
    (a pull request that adds the stack), an error when the ref itself does not exist.

    A symlinked stack file is followed as git stored it at `ref` (the link's target there, relative to the
    link), so the base side is what `pulumi` would have read at that commit; a link that leaves the
    repository is one line, since git has no history of the file it points to."""
    folder = path.parent if path.parent.exists() else None
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=folder,
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        raise TrainfleetError(
            f"{path} is not inside a git repository; give --base a stack file or a preview JSON"
        ) from None
    root = Path(top).resolve()
    # The link itself, not what it points to: resolve only the folders above it.
    here = (folder.resolve() if folder is not None else Path.cwd().resolve() / path.parent) / path.name
    try:
        rel = here.relative_to(root).as_posix()
    except ValueError:
        raise TrainfleetError(
            f"{path} is outside the git repository at {root}; give --base a stack file or a preview JSON"
        ) from None
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=top,
        capture_output=True,
        text=True,
    )
    if commit.returncode != 0:
        raise TrainfleetError(
            f"git ref {ref!r} does not exist here; use a branch, tag or commit (e.g. origin/main)"
        )
    for _ in range(MAX_SYMLINK_HOPS):
        listed = subprocess.run(["git", "ls-tree", ref, "--", rel], cwd=top, capture_output=True, text=True)
        entry = listed.stdout.strip()
        if listed.returncode == 0 and not entry:
            return None
        proc = subprocess.run(["git", "show", f"{ref}:{rel}"], cwd=top, capture_output=True, text=True)
        if proc.returncode != 0:
            problem = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
            raise TrainfleetError(f"cannot read {rel} at git ref {ref!r}: {problem.removeprefix('fatal: ')}")
        if not entry.startswith("120000 "):  # not a symlink: the file's text
            return proc.stdout
        link = proc.stdout
        target = Path(link) if link.startswith("/") else None
        if target is not None:
            try:
                rel = target.resolve().relative_to(root).as_posix()
            except ValueError:
                raise TrainfleetError(
                    f"{rel} is a symlink to {link} at git ref {ref!r}, outside the repository, so git has no "
                    f"history of it; give --base a stack file (e.g. a copy of the old {path.name})"
                ) from None
        else:
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
            if joined == ".." or joined.startswith("../") or joined.startswith("/"):
                raise TrainfleetError(
                    f"{rel} is a symlink to {link} at git ref {ref!r}, outside the repository, so git has no "
                    f"history of it; give --base a stack file (e.g. a copy of the old {path.name})"
                )
            rel = joined
    raise TrainfleetError(f"{path} at git ref {ref!r} is a chain of more than {MAX_SYMLINK_HOPS} symlinks")


@dataclass
class PreviewTerms:
    """What prices a preview document beyond its steps: the usage figures, stack name, regions and stack config
    given on the command line (--usage-file, --stack), used where the document carries no trainfleet config of
    its own (with one, its usage figures are resolved again from it and `usage_file`)."""

    usage: dict
    stack: str | None = None
    regions: dict[str, str] | None = None
    config: StackConfig | None = None
    usage_file: UsageFile | None = None
    usage_where: str = ""

    def price(self, doc: dict[str, Any], path: Path, all_steps=None, absent: int | None = None):
        """The document priced before and after; the after side with the document's own stack config (its
        fleets' sizes, usage figures and expected job cost), else --stack's."""
        from cli.preview.document_config import document_config
        from cli.preview.engine import apply_stack_terms, provider_regions
        from cli.preview.pulumi_json import price_document
        from cli.preview.usage import resolve_usage

        own = document_config(doc, str(path))
        cfg = own.config or self.config
        usage = resolve_usage(cfg, self.usage_file, self.usage_where) if own.config is not None else self.usage
        regions = {**(provider_regions(cfg, own.other) if cfg is not None else {}), **(self.regions or {})}
        fleets = {f.name: f for f in cfg.fleets} if cfg is not None else {}
        priced = price_document(doc, str(path), usage, self.stack, regions, all_steps, absent, fleets)
        if cfg is not None:
            apply_stack_terms(priced.after, cfg, usage)
        else:
            priced.after.expected_note = own.note
        return priced


def diff_preview_files(base_path: Path, head_path: Path, terms: PreviewTerms | dict) -> CostDiff:
    """Two preview documents (base branch, head branch), both run against the same deployed stack: what each
    would leave deployed (their after-states), matched by URN.

    Each side is priced with the stack config its own document carries (`config`, see document_config): its
    fleets' sizes, its usage figures, its expected job cost. A document without one falls back to `config`
    (--stack) and `usage` (`terms`; a plain usage dict is terms without a stack). A resource one document leaves out that the other proves deployed is unchanged on
    that side (pulumi_json.complete_from); what neither names is left out of the totals, which say so. When
    both documents leave out unchanged resources, nothing says what they are, and the diff is refused."""
    from cli.preview.pulumi_json import (
        PreviewJsonError,
        absent_unchanged,
        complete_from,
        load_document,
        steps,
        still_absent,
    )  # fmt: skip

    base_doc, head_doc = load_document(base_path), load_document(head_path)
    base_steps, head_steps = steps(base_doc, str(base_path)), steps(head_doc, str(head_path))
    base_absent, head_absent = absent_unchanged(base_doc), absent_unchanged(head_doc)
    if base_absent and head_absent:
        raise PreviewJsonError(
            f"{base_path} and {head_path} both leave out unchanged resources ({base_absent} and {head_absent}), "
            "so neither says what the whole stack costs; run `pulumi preview --json --show-sames` for at least one"
        )
    completed_base, base_added = complete_from(base_steps, head_steps)
    completed_head, head_added = complete_from(head_steps, base_steps)

    terms = terms if isinstance(terms, PreviewTerms) else PreviewTerms(terms)
    base = terms.price(base_doc, base_path, completed_base, still_absent(base_absent, base_added)).after
    head = terms.price(head_doc, head_path, completed_head, still_absent(head_absent, head_added)).after
    return diff_estimates(base, head, str(base_path), str(head_path))


def diff_one_preview(path: Path, terms: PreviewTerms | dict) -> CostDiff:
    """One preview document: deployed now (oldState) vs after the update (newState), op-aware; the after
    side with the document's own stack config (else `config`), as `diff_preview_files` prices each side."""
    from cli.preview.pulumi_json import load_document

    terms = terms if isinstance(terms, PreviewTerms) else PreviewTerms(terms)
    priced = terms.price(load_document(path), path)
    return diff_estimates(priced.before, priced.after, "deployed", f"after {path.name}", priced.ops)


__all__ = ["CostDiff", "DiffRow", "InputChange", "PRICED", "diff_estimates", "git_show", "input_changes"]
