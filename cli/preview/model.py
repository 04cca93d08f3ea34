"""Plain data for the preview: captured resources, cost components, priced resources and estimates.

Money is USD. A `None` amount means unknown (not priced, or not estimable); it is never counted as $0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The status of one priced resource.
PRICED = "priced"
FREE = "free"
NOT_PRICED = "not priced"  # no pricing function for its type token
NOT_ESTIMABLE = "not estimable"  # a pricing function exists but an input it needs is secret or unknown
STATUSES = (PRICED, FREE, NOT_PRICED, NOT_ESTIMABLE)


@dataclass(frozen=True)
class Resource:
    """One resource as the program declared it (or as a preview step describes it)."""

    type: str  # Pulumi type token, e.g. aws:autoscaling/group:Group
    name: str
    urn: str
    parent: str = ""  # parent URN, "" for the stack's direct children
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    custom: bool = True
    provider: str = ""  # the provider reference (URN::id) a preview document names, "" for the default provider
    managed: bool = True  # False for a `read` step: an existing resource this stack only reads
    has_state: bool = True  # False when a preview step names the resource but carries no state to price

    @property
    def key(self) -> str:
        """What identifies the resource across two runs: its URN."""
        return self.urn

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "urn": self.urn,
            "parent": self.parent,
            "inputs": self.inputs,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resource:
        """From `to_json` (or a priced resource's JSON with "inputs"); the optional fields when present."""
        return cls(
            type=str(data["type"]),
            name=str(data["name"]),
            urn=str(data["urn"]),
            parent=str(data.get("parent") or ""),
            inputs=dict(data.get("inputs") or {}),
            outputs=dict(data.get("outputs") or {}),
            id=str(data.get("id") or ""),
            custom=bool(data.get("custom", True)),
            provider=str(data.get("provider") or ""),
            managed=bool(data.get("managed", True)),
            has_state=bool(data.get("has_state", True)),
        )


@dataclass
class CostComponent:
    """One billable line of one resource (the Infracost shape), with its monthly and planned-job cost."""

    name: str
    unit: str  # node-hour, GB-month, GB, hour, ...
    quantity: float | None  # per month
    unit_price: float | None  # USD per unit
    source: str  # where the unit price comes from (catalog source key, rate id, ...)
    monthly_cost: float | None = None  # filled from quantity x unit_price when not given
    job_quantity: float | None = None  # for the planned job (None: same rate as the month, prorated)
    job_cost: float | None = None
    note: str = ""
    # a group that may launch other instance types (an ASG's fallback overrides): the monthly cost from the
    # cheapest to the dearest type it may launch, with those types; None when it launches one type only
    monthly_range: tuple[float, float] | None = None
    range_types: tuple[str, ...] = ()
    # the usage figures the quantity rests on (checkpoint_gb, egress_gb_per_month, ...): a usage-based line,
    # whose cost is an assumption until a usage file sets them; () for a fixed one (nodes, disks, gateways)
    usage_keys: tuple[str, ...] = ()
    # when the unit price was observed: the oldest of the catalog rows it rests on (ISO date or time), a
    # rate table's date ("2025"), or "" when any of them carries no date
    as_of: str = ""
    # a fleet's line sized by the nodes its stack declares, not by the group's own size input (kept at the
    # deployed value by ignore_changes): the sentence that says so; "" otherwise
    declared_size: str = ""

    @property
    def usage_based(self) -> bool:
        return bool(self.usage_keys)

    def __post_init__(self) -> None:
        if self.monthly_cost is None and self.quantity is not None and self.unit_price is not None:
            self.monthly_cost = self.quantity * self.unit_price
        if self.job_cost is None and self.job_quantity is not None and self.unit_price is not None:
            self.job_cost = self.job_quantity * self.unit_price

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "quantity": _round(self.quantity),
            "unit_price": self.unit_price,
            "monthly_cost": _round(self.monthly_cost),
            "job_quantity": _round(self.job_quantity),
            "job_cost": _round(self.job_cost),
            "source": self.source,
            "note": self.note,
            "monthly_range": None if self.monthly_range is None else [money_round(v) for v in self.monthly_range],
            "range_types": list(self.range_types),
            "usage_based": self.usage_based,
            "usage_keys": list(self.usage_keys),
            "as_of": self.as_of,
            "declared_size": self.declared_size,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CostComponent:
        return cls(
            name=str(data["name"]),
            unit=str(data["unit"]),
            quantity=data.get("quantity"),
            unit_price=data.get("unit_price"),
            source=str(data.get("source") or ""),
            monthly_cost=data.get("monthly_cost"),
            job_quantity=data.get("job_quantity"),
            job_cost=data.get("job_cost"),
            note=str(data.get("note") or ""),
            monthly_range=tuple(data["monthly_range"]) if data.get("monthly_range") else None,  # type: ignore[arg-type]
            range_types=tuple(data.get("range_types") or ()),
            usage_keys=tuple(data.get("usage_keys") or ()),
            as_of=str(data.get("as_of") or ""),
            declared_size=str(data.get("declared_size") or ""),
        )


@dataclass
class PricedResource:
    resource: Resource
    status: str
    components: list[CostComponent] = field(default_factory=list)
    reason: str = ""  # why free / not priced / not estimable

    @property
    def monthly_cost(self) -> float | None:
        """Sum of the components; None when the resource is not priced or any component is unknown."""
        if self.status == FREE:
            return 0.0
        if self.status != PRICED or any(c.monthly_cost is None for c in self.components):
            return None
        return sum(c.monthly_cost for c in self.components)  # type: ignore[misc]

    @property
    def monthly_range(self) -> tuple[float, float] | None:
        """(cheapest, dearest) monthly cost over the instance types the resource may launch; None when it
        launches one type, or its cost is unknown."""
        total = self.monthly_cost
        if total is None or not any(c.monthly_range for c in self.components):
            return None
        low = total + sum(c.monthly_range[0] - c.monthly_cost for c in self.components if c.monthly_range)  # type: ignore[operator]
        high = total + sum(c.monthly_range[1] - c.monthly_cost for c in self.components if c.monthly_range)  # type: ignore[operator]
        return low, high

    @property
    def job_cost(self) -> float | None:
        if self.status == FREE:
            return 0.0
        if self.status != PRICED or any(c.job_cost is None for c in self.components):
            return None
        return sum(c.job_cost for c in self.components)  # type: ignore[misc]

    @property
    def label(self) -> str:
        return f"{self.resource.type}::{self.resource.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.resource.type,
            "name": self.resource.name,
            "urn": self.resource.urn,
            "parent": self.resource.parent,
            "status": self.status,
            "reason": self.reason,
            "monthly_cost": _round(self.monthly_cost),
            "monthly_range": None if self.monthly_range is None else [money_round(v) for v in self.monthly_range],
            "job_cost": _round(self.job_cost),
            "components": [c.to_json() for c in self.components],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PricedResource:
        """From `to_json`; the resource's inputs are read from an "inputs" key when there is one."""
        return cls(
            resource=Resource.from_json(data),
            status=str(data["status"]),
            components=[CostComponent.from_json(c) for c in data.get("components") or []],
            reason=str(data.get("reason") or ""),
        )


@dataclass(frozen=True)
class UsageValue:
    """A usage figure IaC cannot know, with where it came from (stack, usage file, or a labelled default)."""

    value: float
    unit: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "source": self.source}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UsageValue:
        return cls(value=float(data["value"]), unit=str(data["unit"]), source=str(data.get("source") or ""))


@dataclass(frozen=True)
class FleetExpectation:
    """What one fleet's planned job is expected to cost with spot interruptions, failures, restarts (waiting
    for replacement capacity included) and checkpoint overhead, beside its list price for the same job run
    without any of them (the planner's reliability model, for the fleet as the stack declares it)."""

    fleet: str
    usd_per_hour: float  # the fleet's list price, all its nodes
    ideal_hours: float  # the job's useful work and evaluation/stalls, nothing lost
    wall_hours: float  # expected, with interruptions, restarts and checkpoints
    interruptions: float  # expected interruptions and failures over the run
    emergency_checkpoint_fits: bool
    assumptions: tuple[str, ...] = ()
    # hours every node bills: the wall time less what spot nodes not yet held do not bill before the start
    billed_hours: float | None = None  # None: the wall time

    @property
    def list_job_usd(self) -> float:
        return self.usd_per_hour * self.ideal_hours

    @property
    def expected_job_usd(self) -> float:
        return self.usd_per_hour * (self.wall_hours if self.billed_hours is None else self.billed_hours)

    def to_json(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet,
            # exact, not rounded: a reader (a git ref's base program, `Estimate.from_json`) works the job cost
            # out again from them, and must get the cent this process shows
            "usd_per_hour": self.usd_per_hour,
            "ideal_hours": self.ideal_hours,
            "wall_hours": self.wall_hours,
            "billed_hours": self.wall_hours if self.billed_hours is None else self.billed_hours,
            "list_job_usd": money_round(self.list_job_usd),
            "expected_job_usd": money_round(self.expected_job_usd),
            "expected_interruptions": _round(self.interruptions, 2),
            "emergency_checkpoint_fits": self.emergency_checkpoint_fits,
            "assumptions": list(self.assumptions),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FleetExpectation:
        return cls(
            fleet=str(data["fleet"]),
            usd_per_hour=float(data["usd_per_hour"] or 0.0),
            ideal_hours=float(data["ideal_hours"] or 0.0),
            wall_hours=float(data["wall_hours"] or 0.0),
            interruptions=float(data.get("expected_interruptions") or 0.0),
            emergency_checkpoint_fits=bool(data.get("emergency_checkpoint_fits")),
            assumptions=tuple(str(a) for a in data.get("assumptions") or ()),
            billed_hours=float(data["billed_hours"]) if data.get("billed_hours") is not None else None,
        )


@dataclass
class Estimate:
    """Everything one stack (or one preview document) costs."""

    stack: str
    origin: str  # "program (offline, pulumi mocks)" or "pulumi preview --json FILE"
    resources: list[PricedResource]
    usage: dict[str, UsageValue] = field(default_factory=dict)
    guardrail_usd: float | None = None  # budget.fail_above_usd of the stack, if any
    budget_usd: float | None = None  # budget.monthly_limit_usd
    elapsed_s: float | None = None
    # resources a preview document leaves out (unchanged ones, written without --show-sames): the totals
    # then cover only what the document lists
    absent: int = 0
    # per fleet, the planned job's expected cost with interruptions (needs the stack config: job and fleets)
    expected: list[FleetExpectation] = field(default_factory=list)
    expected_note: str = ""  # why there is no expectation, when there is none

    @property
    def expected_job_usd(self) -> float | None:
        """The fleets' expected job cost, all together; None when no fleet could be assessed."""
        return sum(e.expected_job_usd for e in self.expected) if self.expected else None

    def by_status(self, status: str) -> list[PricedResource]:
        return [r for r in self.resources if r.status == status]

    @property
    def monthly_total(self) -> float:
        """Sum of every known monthly cost; see `complete` for whether anything is left out."""
        return sum(r.monthly_cost or 0.0 for r in self.resources)

    @property
    def job_total(self) -> float:
        return sum(r.job_cost or 0.0 for r in self.resources)

    def _priced_components(self) -> list[CostComponent]:
        return [c for r in self.resources if r.status == PRICED for c in r.components]

    @property
    def usage_based_total(self) -> float:
        """The part of the monthly total that rests on usage figures (checkpoint GB, egress GB, ...)."""
        return sum(c.monthly_cost or 0.0 for c in self._priced_components() if c.usage_based)

    @property
    def fixed_total(self) -> float:
        """The part that follows from the resources alone (nodes, disks, gateways, addresses)."""
        return self.monthly_total - self.usage_based_total

    def depends_on_usage(self) -> list[CostComponent]:
        """Usage-based lines whose usage is 0 (a default nobody set): each costs its unit price per unit of
        use, which a $0.00 would hide. One per (name, unit, price), in resource order."""
        seen: dict[tuple, CostComponent] = {}
        for c in self._priced_components():
            if c.usage_based and c.quantity == 0 and c.unit_price:
                seen.setdefault((c.name, c.unit, c.unit_price), c)
        return list(seen.values())

    @property
    def monthly_range(self) -> tuple[float, float] | None:
        """(cheapest, dearest) monthly total over the instance types its groups may launch; None when every
        group launches one type."""
        spans = [(r.monthly_range, r.monthly_cost) for r in self.resources if r.monthly_range]
        if not spans:
            return None
        total = self.monthly_total
        return (total + sum(lo - cost for (lo, _), cost in spans),  # type: ignore[operator]
                total + sum(hi - cost for (_, hi), cost in spans))  # type: ignore[operator]  # fmt: skip

    @property
    def unknown(self) -> list[PricedResource]:
        """Resources whose cost is unknown: not priced or not estimable."""
        return [r for r in self.resources if r.status in (NOT_PRICED, NOT_ESTIMABLE)]

    @property
    def complete(self) -> bool:
        return not self.unknown and not self.absent

    def unknown_by_type(self) -> dict[str, dict[str, int]]:
        """status -> {type token: count} for the resources whose cost is unknown, most frequent first."""
        out: dict[str, dict[str, int]] = {}
        for r in self.unknown:
            counts = out.setdefault(r.status, {})
            counts[r.resource.type] = counts.get(r.resource.type, 0) + 1
        return {s: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for s, c in out.items()}

    def drivers(self, n: int = 3) -> list[PricedResource]:
        """The resources with the largest monthly cost, largest first."""
        priced = [r for r in self.resources if (r.monthly_cost or 0) > 0]
        return sorted(priced, key=lambda r: -(r.monthly_cost or 0))[:n]

    def to_json(self) -> dict[str, Any]:
        counts = {s: len(self.by_status(s)) for s in STATUSES}
        return {
            "stack": self.stack,
            "origin": self.origin,
            "currency": "USD",
            "monthly_cost": _round(self.monthly_total),
            "job_cost": _round(self.job_total),
            "complete": self.complete,
            "counts": counts,
            "unknown_by_type": self.unknown_by_type(),
            "absent_unchanged": self.absent,
            "expected": [e.to_json() for e in self.expected],
            "expected_job_usd": money_round(self.expected_job_usd),
            "expected_note": self.expected_note,
            "usage": {k: v.to_json() for k, v in self.usage.items()},
            "guardrail_usd": self.guardrail_usd,
            "budget_monthly_limit_usd": self.budget_usd,
            "resources": [r.to_json() for r in self.resources],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Estimate:
        """The inverse of `to_json` (totals and counts are worked out again from the resources); an
        "elapsed_s" key is read when there is one."""
        return cls(
            stack=str(data["stack"]),
            origin=str(data.get("origin") or ""),
            resources=[PricedResource.from_json(r) for r in data.get("resources") or []],
            usage={str(k): UsageValue.from_json(v) for k, v in (data.get("usage") or {}).items()},
            guardrail_usd=data.get("guardrail_usd"),
            budget_usd=data.get("budget_monthly_limit_usd"),
            elapsed_s=data.get("elapsed_s"),
            absent=int(data.get("absent_unchanged") or 0),
            expected=[FleetExpectation.from_json(e) for e in data.get("expected") or []],
            expected_note=str(data.get("expected_note") or ""),
        )


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def money_round(value: float | None) -> float | None:
    """A dollar figure as it is shown: rounded once, to the cent, from the exact amount, so the same figure reads
    the same in the table, the markdown and the JSON (never from a rounded rate times rounded hours)."""
    return None if value is None else round(value, 2) + 0.0  # + 0.0: -0.0 reads as 0.0
