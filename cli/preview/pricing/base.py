"""The pricing registry and what every pricing function gets: the resource and a `PricingContext`.

The Infracost pattern: one function per Pulumi type token. A function returns the resource's cost
components, or raises `Free` (it costs nothing by itself) or `NotEstimable` (an input it needs is a
secret or unknown until apply). A type with no function is "not priced", never $0.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cli.preview.model import (
    FREE,
    NOT_ESTIMABLE,
    NOT_PRICED,
    PRICED,
    CostComponent,
    PricedResource,
    Resource,
    UsageValue,
)
from cli.preview.pricing.rates import AS_OF_YEAR as RATES_AS_OF
from cli.preview.usage import GROUP_NODES
from infra.catalog import Catalog, Offer
from infra.config import Fleet
from infra.errors import TrainfleetError, shown

# What `pulumi preview --json` writes for a value it does not know yet, and for a secret.
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
SECRET = "[secret]"
_SECRET_SIG = "4dabf18193072939515e22adb298388d"


# The input (and output) a resource, or its provider, names its region by.
_REGION_KEY = {"aws": "region", "gcp": "region", "azure": "location"}


class Free(Exception):
    """The resource has no charge of its own; the message says why."""


class NotEstimable(Exception):
    """An input the price depends on is a secret or not known until apply."""


class MalformedInputs(TrainfleetError):
    """A resource's inputs are not shaped as its provider's schema says (a hand-edited or corrupt document)."""


class NotPriced(Exception):
    """The catalog or rate table has no price for what the resource asks for."""


Pricer = Callable[[Resource, "PricingContext"], list[CostComponent]]
PRICERS: dict[str, Pricer] = {}
FREE_TYPES: dict[str, str] = {}


def prices(*tokens: str) -> Callable[[Pricer], Pricer]:
    """Register a pricing function for one (or a few aliases of one) type token."""

    def register(fn: Pricer) -> Pricer:
        for token in tokens:
            if token in PRICERS or token in FREE_TYPES:
                raise RuntimeError(f"two pricing functions for {token}")
            PRICERS[token] = fn
        return fn

    return register


def free(reason: str, *tokens: str) -> None:
    """Register types that carry no charge by themselves, with the reason shown to the user."""
    for token in tokens:
        if token in PRICERS or token in FREE_TYPES:
            raise RuntimeError(f"two pricing functions for {token}")
        FREE_TYPES[token] = reason


def is_unknown(value: Any) -> bool:
    return value == UNKNOWN


def is_secret(value: Any) -> bool:
    return value == SECRET or (isinstance(value, dict) and _SECRET_SIG in value)


def get(inputs: dict[str, Any], path: str, default: Any = None, *, required: bool = False) -> Any:
    """inputs['a']['b'][0]... for 'a.b.0'; a secret or unknown value on the way raises NotEstimable."""
    value: Any = inputs
    for part in path.split("."):
        if is_secret(value) or is_unknown(value):
            break
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit():
            value = value[int(part)] if int(part) < len(value) else None
        else:
            value = None
        if value is None:
            if required:
                raise NotEstimable(f"input {path} is not set")
            return default
    if is_secret(value):
        raise NotEstimable(f"input {path} is a secret")
    if is_unknown(value):
        raise NotEstimable(f"input {path} is unknown until apply")
    return value


def elements(inputs: Any, path: str, kind: type = dict, *, ids: bool = False) -> list[Any]:
    """The elements of the list input at `path` ('a.0.b' as for `get`; absent: []), each a `kind`.

    Every list walk in the pricing functions goes through here. An element that is unknown until apply or a
    secret raises NotEstimable naming the input and its index, so the resource reads "not estimable", never
    $0 and never a crash. With `ids`, the elements are resource ids, and one unknown until apply is the
    caller's to resolve or not (a subnet created in the same update). A value that is not a list, or an
    element of another type, raises TypeError, which `price_resource` reports as a malformed document.
    """
    value = get(inputs, path, [])
    shown = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)
    if not isinstance(value, list):
        raise TypeError(f"input {shown} is {type(value).__name__}, not a list")
    kind = str if ids else kind
    for i, item in enumerate(value):
        if is_secret(item):
            raise NotEstimable(f"input {shown}[{i}] is a secret")
        if is_unknown(item) and not ids:
            raise NotEstimable(f"input {shown}[{i}] is unknown until apply")
        if not isinstance(item, kind):
            raise TypeError(f"input {shown}[{i}] is {type(item).__name__}, not {kind.__name__}")
    return value


def number(inputs: dict[str, Any], path: str, default: float | None = None) -> float:
    value = get(inputs, path, default, required=default is None)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise NotEstimable(f"input {path} = {value!r} is not a number") from None


@dataclass
class PricingContext:
    catalog: Catalog
    usage: dict[str, UsageValue]
    resources: list[Resource] = field(default_factory=list)
    regions: dict[str, str] = field(default_factory=dict)  # cloud -> region from provider/stack config
    # fleet name -> the fleet as the stack config declares it (nodes, zones, fallback types), when the config
    # is known: the program's own, or the `config` a preview document carries
    fleets: dict[str, Fleet] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_id = {r.id: r for r in self.resources if r.id and not is_unknown(r.id)}
        self._by_urn = {r.urn: r for r in self.resources}

    def use(self, key: str) -> float:
        if key not in self.usage:  # our bug, not the document's: must not read as a malformed input
            raise RuntimeError(f"usage figure {key!r} was never resolved")
        return self.usage[key].value

    @property
    def hours_per_month(self) -> float:
        return self.use("hours_per_month")

    @property
    def job_hours(self) -> float:
        return self.use("job_hours")

    @property
    def job_fraction(self) -> float:
        """The planned job as a share of a 730-hour month, for prorating monthly charges."""
        return self.job_hours / 730.0

    def by_id(self, resource_id: Any) -> Resource | None:
        if not isinstance(resource_id, str) or is_unknown(resource_id):
            return None
        return self._by_id.get(resource_id)

    def by_urn(self, urn: str) -> Resource | None:
        return self._by_urn.get(urn)

    def related(self, resource: Resource, type_token: str) -> list[Resource]:
        """Resources of a type under the same parent (siblings), else under the grandparent."""
        for parent in (resource.parent, getattr(self.by_urn(resource.parent), "parent", None)):
            if parent:
                found = [r for r in self.resources if r.type == type_token and r.parent == parent]
                if found:
                    return found
        return []

    def region(self, resource: Resource, cloud: str, *candidates: Any) -> str:
        """The resource's own region input (the candidates), else its region as the cloud reported it (outputs),
        else its explicit provider's region, else the stack's provider config."""
        key = _REGION_KEY[cloud]
        provider = self.provider_of(resource)
        reported = resource.outputs.get(key)
        from_provider = provider.inputs.get(key) if provider is not None else None
        for value in (*candidates, reported, from_provider):
            if isinstance(value, str) and value and not is_unknown(value) and not is_secret(value):
                return value
        if provider is not None and (is_unknown(from_provider) or is_secret(from_provider)):
            raise NotEstimable(
                f"the region of its provider {provider.name} is a secret or unknown until apply"
            )
        if cloud in self.regions:
            return self.regions[cloud]
        raise NotEstimable(f"no {cloud} region: set it on the resource or in the stack's provider config")

    def provider_of(self, resource: Resource) -> Resource | None:
        """The explicit provider a preview step names (`PROVIDER_URN::id`), if the document declares it."""
        if not resource.provider.startswith("urn:pulumi:"):
            return None
        return self.by_urn(resource.provider.rsplit("::", 1)[0])


def price_resource(resource: Resource, ctx: PricingContext) -> PricedResource:
    if not resource.managed:
        return PricedResource(
            resource,
            FREE,
            reason="read, not managed: an existing resource this stack only reads (Resource.get); "
            "its cost belongs to whoever created it",
        )
    if not resource.custom or resource.type == "pulumi:pulumi:Stack":
        return PricedResource(resource, FREE, reason="component: groups resources that are priced one by one")
    if resource.type in FREE_TYPES:
        return PricedResource(resource, FREE, reason=FREE_TYPES[resource.type])
    if resource.type.startswith("pulumi:providers:"):
        return PricedResource(resource, FREE, reason="a provider is configuration, not a cloud resource")
    fn = PRICERS.get(resource.type)
    if fn is None:
        return PricedResource(resource, NOT_PRICED, reason=f"no pricing function for {resource.type}")
    if not resource.has_state:
        return PricedResource(
            resource, NOT_ESTIMABLE,
            reason="the preview step carries no state (no inputs) for this resource; "
            "produce the document with `pulumi preview --json`",
        )  # fmt: skip
    try:
        components = fn(resource, ctx)
    except Free as exc:
        return PricedResource(resource, FREE, reason=str(exc))
    except NotEstimable as exc:
        return PricedResource(resource, NOT_ESTIMABLE, reason=str(exc))
    except NotPriced as exc:
        return PricedResource(resource, NOT_PRICED, reason=str(exc))
    except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError, IndexError) as exc:
        # A list where the schema has a number, a string where it has an object: a price from such a
        # document would be a guess, so the whole preview stops here rather than pricing it as $0.
        raise MalformedInputs(
            f"{resource.urn}: its inputs, or those of a resource it reads (its launch template), are not "
            "shaped as the provider's schema says "
            f"({type(exc).__name__}: {shown(str(exc))}); make the file with `pulumi preview --json`"
        ) from None
    if not components:
        return PricedResource(resource, FREE, reason="no billable component for these inputs")
    unknown = [c for c in components if c.monthly_cost is None]
    if unknown:
        reason = "; ".join(c.note or f"{c.name}: no price" for c in unknown)
        return PricedResource(resource, NOT_PRICED, components, reason=reason)
    return PricedResource(resource, PRICED, components)


def price_all(resources: Iterable[Resource], ctx: PricingContext) -> list[PricedResource]:
    return [price_resource(r, ctx) for r in resources]


# ---- shared helpers for the per-cloud functions -------------------------------------------------


def fleet_of(ctx: PricingContext, name: Any) -> Fleet | None:
    """The stack's fleet a group's trainfleet-fleet tag (or GCP label) names, when the stack config is known."""
    if not isinstance(name, str):
        return None
    if name in ctx.fleets:
        return ctx.fleets[name]
    from infra.naming import gcp_labels

    return next((f for f in ctx.fleets.values() if gcp_labels({"f": f.name})["f"] == name), None)


def declared_size(
    ctx: PricingContext, fleet_name: Any, nodes: int, what: str
) -> tuple[int, str]:
    """(nodes, note) of a trainfleet fleet's group: the nodes its stack declares, which `start_run` launches.

    The group's own size input (`what`: desiredCapacity, targetSize, sku.capacity) is 0 at creation and never
    in an update (ignore_changes on AWS and GCP, left out on Azure): `start_run` and the node agent own the size,
    so a real `pulumi preview` shows 0 or the deployed value there, never a change of `nodes`. The stack's `nodes` is what the fleet runs; the note says when they differ."""
    fleet = fleet_of(ctx, fleet_name)
    if fleet is None or fleet.nodes == nodes:
        return nodes, ""
    return fleet.nodes, (
        f"{fleet.nodes} nodes as the stack declares (fleets[{fleet.name}].nodes, what `start_run` launches), "
        f"not the group's {what} {nodes}: pulumi up never sizes a group (created empty, sized by start_run)"
    )


def autoscaled_nodes(
    r: Resource, ctx: PricingContext, missing: str, most: Callable[[], tuple[int, str]]
) -> tuple[int, str]:
    """Nodes of a group whose `missing` size input is unset, so its scaling sizes it: a usage file's
    `group_nodes` for it, else `most()` (the most it can scale to, and what says so), never the cheapest
    guess; and the note that says which."""
    given = ctx.usage.get(GROUP_NODES + r.name)
    if given is not None:
        return int(given.value), f"no {missing}: {int(given.value)} nodes from {given.source} (group_nodes)"
    nodes, what = most()
    return nodes, (
        f"no {missing}: priced at {what} {nodes}, the most it can scale to "
        f"(a usage file's group_nodes: {{{r.name}: N}} says otherwise)"
    )


def fleet_components(
    ctx: PricingContext,
    *,
    cloud: str,
    region: str,
    zones: list[str],
    instance_type: str,
    on_demand_nodes: int,
    spot_nodes: int,
    fallback_types: tuple[str, ...] = (),
    note: str = "",
    declared: str = "",
) -> list[CostComponent]:
    """Compute for a group of identical nodes: one component per purchase option that has nodes.

    Spot is priced at the mean catalog spot price of the group's zones (a group spreads its nodes
    evenly across them), on-demand at the catalog on-demand price; both per node-hour. A group that may
    launch `fallback_types` too (an ASG's overrides: price-capacity-optimized spot picks by capacity and
    price, not by order) is priced at its first type, with the range over every type it may launch.
    `note` (how the group was sized or zoned) leads each line's note, after `declared` (`declared_size`'s
    sentence, kept on the line as its `declared_size` too).
    """
    offers = ctx.catalog.offers(cloud=cloud, region=region, instance_type=instance_type)
    if not offers:
        raise NotPriced(f"the catalog has no {cloud} {instance_type} in {region}")
    pool = zone_pool(offers, zones)
    zone_note = ""
    if zones and not any(o.zone in zones for o in offers):
        zone_note = f"zones {', '.join(zones)} not in the catalog; priced over every {region} zone. "
    components = []
    for purchase, nodes in (("on-demand", on_demand_nodes), ("spot", spot_nodes)):
        if nodes <= 0:
            continue
        unit_price, where, source = _mean_price(pool, purchase)
        c = CostComponent(
            as_of=_oldest(pool, purchase),
            name=f"{instance_type} {purchase} ({nodes} node{'s' if nodes != 1 else ''})",
            unit="node-hour",
            quantity=nodes * ctx.hours_per_month,
            unit_price=unit_price,
            job_quantity=nodes * ctx.job_hours,
            source=source,
            note="; ".join(n for n in (declared, note, (zone_note + where) if unit_price is not None
                                       else f"catalog has no {purchase} price for {instance_type} in {region}") if n),
            declared_size=declared,
        )  # fmt: skip
        if fallback_types:
            _price_range(ctx, c, purchase, cloud, region, zones, (instance_type, *fallback_types))
        components.append(c)
    return components


def zone_pool(offers: list[Offer], zones: list[str] | tuple[str, ...]) -> list[Offer]:
    """The offers in a group's zones (it spreads its nodes across them), else every offer of the region: the
    zones are unknown, or the catalog has none of them."""
    return ([o for o in offers if o.zone in zones] or offers) if zones else offers


def _price_range(
    ctx: PricingContext, c: CostComponent, purchase: str, cloud: str, region: str, zones: list[str],
    types: tuple[str, ...],
) -> None:  # fmt: skip
    """Set `c`'s monthly range over the instance types the group may launch (each at its zones' mean
    price); a type the catalog has no price for is named in the note, outside the range."""
    if c.unit_price is None or c.quantity is None:
        return
    priced, missing = {}, []
    for t in dict.fromkeys(types):
        offers = ctx.catalog.offers(cloud=cloud, region=region, instance_type=t)
        price = _mean_price(zone_pool(offers, zones), purchase)[0]
        if price is None:
            missing.append(t)
        else:
            priced[t] = price * c.quantity
    if len(priced) > 1:
        c.monthly_range = (min(priced.values()), max(priced.values()))
        c.range_types = tuple(priced)
    if missing:
        c.note = "; ".join(n for n in (c.note, f"no {purchase} price for fallback {', '.join(missing)}") if n)


def _oldest(pool: list[Offer], purchase: str) -> str:
    """When the oldest price of `pool` was observed; "" when any has no date (the embedded snapshot's rows)."""
    dates = [o.as_of for o in pool if o.price(purchase) is not None]
    return "" if not dates or not all(dates) else min(dates)


def _mean_price(pool: list[Offer], purchase: str) -> tuple[float | None, str, str]:
    known = [(o.zone or o.region, o.price(purchase), o.source) for o in pool if o.price(purchase) is not None]
    if not known:
        return None, "", "catalog"
    sources = sorted({s for _, _, s in known})
    mean = statistics.fmean(p for _, p, _ in known)
    if len(known) == 1:
        where, price, _ = known[0]
        return price, f"{where} ${price:.4f}/h", "catalog:" + ",".join(sources)
    detail = ", ".join(f"{w} ${p:.4f}" for w, p, _ in sorted(known))
    return mean, f"mean of {len(known)} zones: {detail}", "catalog:" + ",".join(sources)


_ASSET_SIG = "c44067f5952c0a294b673a41bacd8c17"  # the engine's marker of an asset (pulumi/runtime/rpc.py)


def uploaded_bytes(r: Resource) -> int:
    """The size of an object the program uploads: its inline `content`, or the text of its `source` asset: a
    StringAsset as the mock runtime and `pulumi preview --json` write it ({sig: asset sig, "text": ...}) or as the
    policy SDK hands it over (a pulumi.StringAsset, with `.text`)."""
    content = r.inputs.get("content")
    if isinstance(content, str) and not is_unknown(content) and not is_secret(content):
        return len(content.encode())
    source = r.inputs.get("source")
    if isinstance(source, dict) and source.get(_SECRET_SIG) == _ASSET_SIG:
        text = source.get("text")
        if isinstance(text, str):
            return len(text.encode())
    text = getattr(source, "text", None)
    if isinstance(text, str):
        return len(text.encode())
    raise NotEstimable("object size unknown: no inline content and no text asset as its source")


def storage_component(
    ctx: PricingContext,
    name: str,
    quantity: float,
    rate_id: str,
    region: str | None,
    *,
    usage_key: str | None = None,
    with_nodes: bool = False,
    note: str = "",
    gb: bool = False,
    usage_keys: tuple[str, ...] = (),
) -> CostComponent:
    """A per-month charge (GB-, IOPS- or MB/s-month); the planned job pays its hours' share of a month.
    `with_nodes`: it lives as long as a fleet's node (a node's disk), so the month is the fleet's hours.
    `gb`: `quantity` is decimal GB (bytes / 10^9), converted to the rate's unit (GiB for S3 and GCS).
    `usage_key` / `usage_keys`: the usage figures the quantity rests on (a usage-based line)."""
    from cli.preview.pricing.rates import rate, region_note, stored_units

    r = rate(rate_id)
    notes = [note, region_note(rate_id, region)]
    if usage_key:
        notes.append(f"{usage_key}: {ctx.usage[usage_key].source}")
    if gb and r.bytes_per_unit != 1e9:
        notes.append(f"{quantity:,.3f} GB = {stored_units(quantity, rate_id):,.3f} {r.unit.split('-')[0]}")
        quantity = stored_units(quantity, rate_id)
    return CostComponent(
        name=name,
        unit=r.unit,
        quantity=quantity * (ctx.hours_per_month / 730.0 if with_nodes else 1.0),
        unit_price=r.usd,
        job_quantity=quantity * ctx.job_fraction,
        source=f"rate:{rate_id}",
        note="; ".join(n for n in notes if n),
        usage_keys=(usage_key,) if usage_key else usage_keys,
        as_of=RATES_AS_OF,
    )


def hourly_component(
    ctx: PricingContext,
    name: str,
    count: float,
    rate_id: str,
    region: str | None,
    *,
    with_nodes: bool = False,
) -> CostComponent:
    """Per-hour charges: all month (730 h) for always-on infrastructure (NAT, addresses), or the fleet's
    hours_per_month for charges that follow the nodes (`with_nodes`)."""
    from cli.preview.pricing.rates import rate, region_note

    r = rate(rate_id)
    return CostComponent(
        as_of=RATES_AS_OF,
        name=name,
        unit=r.unit,
        quantity=count * (ctx.hours_per_month if with_nodes else 730.0),
        unit_price=r.usd,
        job_quantity=count * ctx.job_hours,
        source=f"rate:{rate_id}",
        note=region_note(rate_id, region),
    )


def transfer_component(
    ctx: PricingContext, name: str, usage_key: str, rate_id: str, region: str | None
) -> CostComponent:
    """Per-GB transfer, with the monthly GB from the usage figures (file, stack or labelled default)."""
    return storage_component(ctx, name, ctx.use(usage_key), rate_id, region, usage_key=usage_key, gb=True)


def known_types() -> dict[str, str]:
    """Every type token the preview knows: 'priced' or 'free'."""
    return {**{t: PRICED for t in PRICERS}, **{t: FREE for t in FREE_TYPES}}


__all__ = [
    "FREE",
    "NOT_ESTIMABLE",
    "NOT_PRICED",
    "PRICED",
    "Free",
    "NotEstimable",
    "NotPriced",
    "PricingContext",
    "free",
    "get",
    "number",
    "prices",
    "price_all",
    "price_resource",
]
