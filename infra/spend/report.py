"""Cost lines from every cloud, totals by service and day, and the comparison with the plan."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import date


@dataclass(frozen=True)
class CostLine:
    cloud: str
    service: str
    day: str  # YYYY-MM-DD
    cost: float
    currency: str = "USD"


@dataclass
class SpendReport:
    stack: str
    since: date
    until: date  # inclusive
    tag: str
    lines: list[CostLine] = field(default_factory=list)
    clouds: list[str] = field(default_factory=list)
    planned_cost_usd: float | None = None
    planned_hours: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def currencies(self) -> set[str]:
        return {line.currency for line in self.lines} or {"USD"}

    @property
    def actual(self) -> float:
        return round(sum(line.cost for line in self.lines), 6)

    def by_service(self) -> list[tuple[str, str, float]]:
        totals: dict[tuple[str, str], float] = {}
        for line in self.lines:
            totals[(line.cloud, line.service)] = totals.get((line.cloud, line.service), 0.0) + line.cost
        return sorted(
            ((c, s, round(v, 6)) for (c, s), v in totals.items()), key=lambda t: (-t[2], t[0], t[1])
        )

    def by_day(self) -> list[tuple[str, dict[str, float], float]]:
        days: dict[str, dict[str, float]] = {}
        for line in self.lines:
            per_cloud = days.setdefault(line.day, {})
            per_cloud[line.cloud] = per_cloud.get(line.cloud, 0.0) + line.cost
        return [
            (d, {c: round(v, 6) for c, v in pc.items()}, round(sum(pc.values()), 6))
            for d, pc in sorted(days.items())
        ]

    @property
    def difference(self) -> float | None:
        return None if self.planned_cost_usd is None else round(self.actual - self.planned_cost_usd, 6)

    @property
    def difference_percent(self) -> float | None:
        if self.planned_cost_usd is None:
            return None
        return round(100 * (self.actual - self.planned_cost_usd) / self.planned_cost_usd, 2)

    def to_json(self) -> dict:
        return {
            "stack": self.stack,
            "tag": self.tag,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "clouds": self.clouds,
            "currency": ",".join(sorted(self.currencies)),
            "actual": self.actual,  # in `currency`
            "actual_usd": self.actual if self.currencies == {"USD"} else None,  # never a EUR sum labelled USD
            "planned_cost_usd": self.planned_cost_usd,
            "planned_hours": self.planned_hours,
            "difference_usd": self.difference,
            "difference_percent": self.difference_percent,
            "by_service": [{"cloud": c, "service": s, "cost": v} for c, s, v in self.by_service()],
            "by_day": [{"day": d, "clouds": pc, "cost": t} for d, pc, t in self.by_day()],
            "lines": [asdict(line) for line in self.lines],
            "notes": self.notes,
        }
