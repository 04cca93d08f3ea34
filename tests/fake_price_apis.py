"""A local HTTP server (127.0.0.1, free port) speaking the price and cost APIs trainfleet calls.

Shapes follow the providers' documentation:
- AWS Price List GetProducts (JSON 1.1, X-Amz-Target AWSPriceListService.GetProducts): PriceList is a
  list of JSON strings {product: {attributes}, terms: {OnDemand: {..: {priceDimensions: {..:
  {unit: Hrs, pricePerUnit: {USD}}}}}}}, NextToken pages; errors as {"__type": ThrottlingException}.
- Azure Retail Prices (GET /api/retail/prices?$filter=...): {Items: [...], NextPageLink, Count}.
- GCP Cloud Billing Catalog (GET /v1/services/6F81-5844-456A/skus): {skus: [...], nextPageToken}.
- BigQuery jobs.query (POST /bigquery/v2/projects/P/queries) and getQueryResults (GET .../queries/JOB):
  the SQL sent is run (in SQLite, translated narrowly) over seeded rows of the standard billing export.
- AWS Cost Explorer GetCostAndUsage (JSON 1.1, POST /aws-ce): the Filter expression, TimePeriod (End
  exclusive), Granularity and GroupBy are evaluated over seeded per-day, per-tag rows.
- Azure Cost Management query (POST /subscriptions/S/providers/Microsoft.CostManagement/query): the
  filter, timePeriod, grouping and aggregation are evaluated over seeded per-day rows.
The cost APIs answer what the request asks of the seeded rows, never canned rows, so a wrong date bound,
tag key or value changes the answer. Prices are derived from the embedded snapshot (x PRICE_FACTOR), so
tests can compute what to expect.
Faults are configured per region: always throttled, throttled once, a malformed page, a slow answer.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler

from infra.catalog.loader import DATA_DIR, read_offers
from tests.loopback import LoopbackServer

PRICE_FACTOR = 1.25
GCP_CORE, GCP_RAM = 0.031, 0.0042  # USD per vCPU-hour and GiB-hour, on demand
GCP_GPU = {
    "Nvidia Tesla A100 GPU": 2.9,
    "Nvidia Tesla A100 80GB GPU": 3.9,
    "Nvidia H100 80GB GPU": 9.8,
    "Nvidia H100 80GB Mega GPU": 10.5,
    "Nvidia H200 141GB GPU": 10.9,
    "Nvidia B200 GPU": 12.1,
    "Nvidia L4 GPU": 0.56,
}
GCP_HOSTS = [
    "A2 Instance",
    "A3 Instance",
    "A3Plus Instance",
    "A3Ultra Instance",
    "A4 Instance",
    "G2 Instance",
]
GCP_SPOT_FACTOR = 0.4


def gcp_expected(vcpus: float, memory_gib: float, gpus: int, gpu_stem: str, spot: bool) -> float:
    f = GCP_SPOT_FACTOR if spot else 1.0
    return round(f * (vcpus * GCP_CORE + memory_gib * GCP_RAM + gpus * GCP_GPU[gpu_stem]), 6)


@dataclass
class Faults:
    aws_throttled_regions: set[str] = field(default_factory=set)  # pricing always ThrottlingException
    azure_throttled_regions: set[str] = field(default_factory=set)  # always 429
    azure_throttled_once: set[str] = field(default_factory=set)  # first request 429, then fine
    azure_malformed_regions: set[str] = field(default_factory=set)  # page 2 is not JSON
    azure_delay_s: dict[str, float] = field(default_factory=dict)  # every page of that region is slow
    gcp: str = "ok"  # ok | throttled | malformed | down
    azure_page_size: int = 40
    gcp_page_size: int = 100


def _money(usd: float) -> dict:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": int(round((usd - units) * 1e9))}


# -- BigQuery: the standard billing export, and GoogleSQL run in SQLite ---------------------------
# Rows are shaped as the standard usage cost export writes them:
# https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/standard-usage
EXPORT_SCALARS = ("billing_account_id", "usage_start_time", "usage_end_time", "cost", "currency",
                  "currency_conversion_rate", "cost_type", "export_time")  # fmt: skip
EXPORT_STRUCTS = {  # STRUCT columns: stored flattened as "service.description" and so on
    "service": ("id", "description"),
    "sku": ("id", "description"),
    "project": ("id", "name"),
    "location": ("location", "country", "region", "zone"),
    "usage": ("amount", "unit", "amount_in_pricing_units", "pricing_unit"),
    "invoice": ("month",),
}
EXPORT_ARRAYS = {  # ARRAY<STRUCT> columns: stored as JSON text, read back through UNNEST
    "labels": ("key", "value"),
    "system_labels": ("key", "value"),
    "credits": ("name", "amount", "full_name", "id", "type"),
}
BILLING_ACCOUNT = "012345-6789AB-CDEF01"


def billing_export_row(service: str, usage_start: str, cost: float, *, labels: dict | None = None,
                       credits: tuple[float, ...] = (), currency: str = "USD",
                       account: str = BILLING_ACCOUNT) -> dict:  # fmt: skip
    """One hour of usage as the standard export writes it: nested STRUCTs, labels as [{key, value}],
    credits as negative amounts."""
    start = _utc(usage_start)
    return {
        "billing_account_id": account,
        "service": {"id": f"id-{service}", "description": service},
        "sku": {"id": "0000-0000-0000", "description": f"{service} usage"},
        "usage_start_time": start.isoformat(),
        "usage_end_time": (start + timedelta(hours=1)).isoformat(),
        "project": {"id": "proj-1", "name": "proj-1"},
        "labels": [{"key": k, "value": v} for k, v in (labels or {}).items()],
        "system_labels": [],
        "location": {"location": "us-central1", "country": "US", "region": "us-central1", "zone": None},
        "cost": cost,
        "currency": currency,
        "currency_conversion_rate": 1.0,
        "usage": {
            "amount": 3600.0,
            "unit": "seconds",
            "amount_in_pricing_units": 1.0,
            "pricing_unit": "hour",
        },
        "credits": [
            {
                "name": "Sustained use discount",
                "amount": c,
                "full_name": None,
                "id": "sud",
                "type": "SUSTAINED_USAGE_DISCOUNT",
            }
            for c in credits
        ],  # fmt: skip
        "invoice": {"month": start.strftime("%Y%m")},
        "cost_type": "regular",
        "export_time": (start + timedelta(hours=6)).isoformat(),
    }


def _utc(text: str) -> datetime:
    """A TIMESTAMP: ISO 8601 with an offset (or none: UTC, as BigQuery assumes)."""
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _sqlite_timestamp(text: str) -> str:
    # The form SQLite's datetime() returns, so stored timestamps and TIMESTAMP(@p) compare as text.
    return _utc(text).strftime("%Y-%m-%d %H:%M:%S")


class BigQueryError(Exception):
    """An error as jobs.query answers it: HTTP status, errors[].reason and message."""

    STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND"}

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict:
        error = {"message": self.message, "domain": "global", "reason": self.reason}
        return {"error": {"code": self.code, "message": self.message, "errors": [error],
                          "status": self.STATUS.get(self.code, "UNKNOWN")}}  # fmt: skip


def _invalid_query(message: str) -> BigQueryError:
    return BigQueryError(400, "invalidQuery", message)


class BillingExport:
    """Seeded export tables, queried with the GoogleSQL the client sends.

    All rows live in one SQLite table (column _table names the BigQuery table). A query is translated
    narrowly, one GoogleSQL feature at a time (see to_sqlite), and what this stand-in does not know
    fails as an invalid query instead of being guessed at. Not modelled: type checking (SQLite compares
    anything with anything) and BigQuery's rule that a selected column be grouped or aggregated.
    """

    def __init__(self) -> None:
        self.tables: set[str] = set()
        self._columns = [*EXPORT_SCALARS, *(f"{s}.{f}" for s, fs in EXPORT_STRUCTS.items() for f in fs),
                         *EXPORT_ARRAYS]  # fmt: skip
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute(f"CREATE TABLE export_rows (_table TEXT, {', '.join(map(_quoted, self._columns))})")

    def add_table(self, name: str, rows: list[dict]) -> None:
        """`project.dataset.table` and its rows (from billing_export_row)."""
        self.tables.add(name)
        with self._lock:
            self._db.executemany(
                f"INSERT INTO export_rows VALUES ({', '.join('?' * (1 + len(self._columns)))})",
                [(name, *self._flat(row)) for row in rows],
            )

    def _flat(self, row: dict) -> list:
        values = []
        for column in self._columns:
            struct, _, field = column.partition(".")
            if field:
                values.append(row[struct][field])
            elif column in EXPORT_ARRAYS:
                values.append(json.dumps(row[column]))
            elif column.endswith("_time"):
                values.append(_sqlite_timestamp(row[column]))
            else:
                values.append(row[column])
        return values

    def query(self, sql: str, parameters: list[dict], project: str) -> tuple[list[str], list[tuple]]:
        """Column names and rows of `sql`, or a BigQueryError as jobs.query would answer."""
        translated, names = to_sqlite(sql, self._table_source(project))
        bound = {p.get("name"): bind_parameter(p) for p in parameters}
        for name in names:
            if name not in bound:
                raise _invalid_query(f"Query parameter '{name}' not found")
        with self._lock:
            try:
                cursor = self._db.execute(translated, bound)
            except sqlite3.Error as exc:  # what SQLite cannot run, BigQuery would not run either
                raise _invalid_query(
                    f"Syntax error: {exc} (query as run by the local stand-in: {translated})"
                ) from None
            return [_column_name(d[0], i) for i, d in enumerate(cursor.description)], cursor.fetchall()

    def _table_source(self, project: str):
        def source(name: str) -> str:
            full = name if name.count(".") == 2 else f"{project}.{name}"
            if full.endswith("*"):  # a wildcard table: every table whose name starts with the prefix
                matched = sorted(t for t in self.tables if t.startswith(full[:-1]))
            else:
                matched = [full] if full in self.tables else []
            if not matched:
                proj, dataset, table = (full.split(".") + ["", ""])[:3]
                if not any(t.startswith(f"{proj}.{dataset}.") for t in self.tables):
                    raise BigQueryError(
                        404, "notFound", f"Not found: Dataset {proj}:{dataset} was not found in location US"
                    )
                raise BigQueryError(
                    404, "notFound", f"Not found: Table {proj}:{dataset}.{table} was not found in location US"
                )
            listed = ", ".join("'" + t.replace("'", "''") + "'" for t in matched)
            return f"(SELECT * FROM export_rows WHERE _table IN ({listed}))"

        return source


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _column_name(name: str, index: int) -> str:
    # BigQuery names an unaliased column after its last path part, or f0_, f1_ ... for an expression.
    name = name.strip('"').rsplit(".", 1)[-1]
    return name if re.fullmatch(r"[A-Za-z_]\w*", name) else f"f{index}_"


# Literals stay as they are; everything between them is translated.
_STRING_LITERAL = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")
_FUNCTIONS = {  # GoogleSQL function -> SQLite function with the same arguments and meaning here
    "FORMAT_DATE": "strftime",  # %Y-%m-%d means the same in both
    "ANY_VALUE": "MIN",  # any value of the group is allowed; MIN is one
    "TIMESTAMP": "datetime",  # UTC 'YYYY-MM-DD HH:MM:SS', the form timestamps are stored in
    # DATE(ts) and IFNULL exist in SQLite with the same meaning (DATE of a timestamp in UTC)
}


def to_sqlite(sql: str, table_source) -> tuple[str, list[str]]:
    """GoogleSQL -> SQLite for the constructs a billing-export query uses; returns the query and the
    @parameter names it uses."""
    parts, names, end = [], [], 0
    for literal in _STRING_LITERAL.finditer(sql):
        parts.append(_translate_code(sql[end : literal.start()], table_source, names))
        text = literal.group()
        parts.append(text if text[0] == "'" else "'" + text[1:-1].replace("'", "''") + "'")  # "x" is a string
        end = literal.end()
    parts.append(_translate_code(sql[end:], table_source, names))
    return "".join(parts), names


def _translate_code(code: str, table_source, names: list[str]) -> str:
    def backticked(m: re.Match) -> str:  # `project.dataset.table` is a table; `name` an identifier
        return table_source(m.group(1)) if "." in m.group(1) else _quoted(m.group(1))

    def parameter(m: re.Match) -> str:
        names.append(m.group(1))
        return f":{m.group(1)}"

    structs = "|".join(EXPORT_STRUCTS)
    code = re.sub(rf"(?<![`.])\b({structs})\.(\w+)\b", lambda m: _quoted(f"{m.group(1)}.{m.group(2)}"), code)
    code = re.sub(r"\bUNNEST\s*\(\s*(\w+)\s*\)", _unnest, code, flags=re.IGNORECASE)
    for function, replacement in _FUNCTIONS.items():
        code = re.sub(rf"\b{function}\s*\(", f"{replacement}(", code, flags=re.IGNORECASE)
    code = re.sub(r"@(\w+)", parameter, code)
    return re.sub(r"`([^`]+)`", backticked, code)  # last: no rewrite above touches the tables it inserts


def _unnest(m: re.Match) -> str:
    """UNNEST(array_of_structs) -> the array's elements as rows with the struct's fields as columns."""
    column = m.group(1)
    if column not in EXPORT_ARRAYS:
        raise _invalid_query(
            f"Values referenced in UNNEST must be arrays. UNNEST contains expression of type {column}"
        )
    fields = ", ".join(f"json_extract(element.value, '$.{f}') AS {f}" for f in EXPORT_ARRAYS[column])
    return f"(SELECT {fields} FROM json_each({column}) AS element)"


def bind_parameter(parameter: dict):
    """A named query parameter's value, typed as its parameterType says (values travel as strings):
    https://cloud.google.com/bigquery/docs/reference/rest/v2/QueryParameter"""
    kind = parameter.get("parameterType", {}).get("type")
    value = parameter.get("parameterValue", {}).get("value")
    if value is None:
        return None
    try:
        if kind == "STRING":
            return value
        if kind == "INT64":
            return int(value)
        if kind in ("FLOAT64", "NUMERIC", "BIGNUMERIC"):
            return float(value)
        if kind == "BOOL":
            return {"true": 1, "false": 0}[value.lower()]
        if kind == "DATE":
            return date.fromisoformat(value).isoformat()
        if kind in ("TIMESTAMP", "DATETIME"):
            return _sqlite_timestamp(value)
    except (ValueError, KeyError):
        raise _invalid_query(
            f"Invalid {kind} value {value!r} for query parameter {parameter.get('name')}"
        ) from None
    raise _invalid_query(
        f"query parameter {parameter.get('name')} has type {kind}, which this stand-in does not model"
    )


def _bigquery_type(values: list) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) for v in present):
        return "INTEGER"
    return "FLOAT" if present and all(isinstance(v, (int, float)) for v in present) else "STRING"


def _bigquery_cell(value) -> dict:
    # The REST API sends every value as a string (or null), whatever its type.
    return {"v": None if value is None else repr(value) if isinstance(value, float) else str(value)}


# -- AWS Cost Explorer GetCostAndUsage -----------------------------------------------------------
# https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_GetCostAndUsage.html
# https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_Expression.html
CE_METRICS = {"AmortizedCost", "BlendedCost", "NetAmortizedCost", "NetUnblendedCost", "NormalizedUsageAmount",
              "UnblendedCost", "UsageQuantity"}  # fmt: skip
CE_DIMENSIONS = {"SERVICE": "service", "REGION": "region", "LINKED_ACCOUNT": "account",
                 "RECORD_TYPE": "record_type"}  # the dimensions seeded rows carry  # fmt: skip
CE_ROOTS = ("And", "Or", "Not", "Dimensions", "Tags", "CostCategories")
CE_PAGE_PERIODS = 2  # periods per answer, so the client has to follow NextPageToken


def cost_explorer_row(day: str, service: str, amount: str, *, tags: dict | None = None,
                      region: str = "us-east-1", record_type: str = "Usage") -> dict:  # fmt: skip
    """One day of one service's UnblendedCost (USD, as a decimal string) for resources with these tags."""
    return {"day": day, "service": service, "region": region, "account": "123456789012",
            "record_type": record_type, "tags": tags or {}, "UnblendedCost": Decimal(amount)}  # fmt: skip


class CostExplorerError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def _ce_invalid(message: str) -> CostExplorerError:
    return CostExplorerError("ValidationException", message)


def ce_matches(expression: dict, row: dict) -> bool:
    """Whether a row passes a Cost Explorer Expression: one root per expression; MatchOptions default to
    EQUALS and CASE_SENSITIVE; Dimensions take EQUALS only, Tags EQUALS or ABSENT."""
    roots = [k for k in CE_ROOTS if expression.get(k) is not None]
    if len(roots) != 1:
        raise _ce_invalid("Expression has more than one roots. Only one root operator is allowed for each "
                          "expression: And, Or, Not, Dimensions, Tags, CostCategories")  # fmt: skip
    root = roots[0]
    if root == "And":
        return all(ce_matches(e, row) for e in expression["And"])
    if root == "Or":
        return any(ce_matches(e, row) for e in expression["Or"])
    if root == "Not":
        return not ce_matches(expression["Not"], row)
    if root == "Dimensions":
        dim = expression["Dimensions"]
        _ce_options(dim, {"EQUALS", "CASE_SENSITIVE"})
        if dim.get("Key") not in CE_DIMENSIONS:
            raise _ce_invalid(
                f"dimension {dim.get('Key')} is not one this stand-in seeds ({', '.join(CE_DIMENSIONS)})"
            )
        return row[CE_DIMENSIONS[dim["Key"]]] in dim.get("Values", [])
    if root == "Tags":
        tag = expression["Tags"]
        options = _ce_options(tag, {"EQUALS", "ABSENT", "CASE_SENSITIVE"})
        if not tag.get("Key"):
            raise _ce_invalid("Tags expression needs a Key")
        value = row["tags"].get(tag["Key"])  # tag keys and values are case-sensitive
        return ("ABSENT" in options and value is None) or (
            "EQUALS" in options and value in tag.get("Values", [])
        )
    raise _ce_invalid("this stand-in seeds no cost categories")


def _ce_options(values: dict, allowed: set[str]) -> set[str]:
    options = set(values.get("MatchOptions") or ["EQUALS", "CASE_SENSITIVE"])
    if not options <= allowed:
        raise _ce_invalid(
            f"MatchOptions {sorted(options - allowed)} are not valid here; use {sorted(allowed)}"
        )
    return options if options - {"CASE_SENSITIVE"} else options | {"EQUALS"}


def ce_periods(request: dict) -> list[tuple[date, date]]:
    """[Start, End) cut into days or calendar months; Start is inclusive and End exclusive."""
    period = request.get("TimePeriod") or {}
    try:
        start, end = date.fromisoformat(period["Start"]), date.fromisoformat(period["End"])
    except (KeyError, TypeError, ValueError):
        raise _ce_invalid("TimePeriod needs Start and End as YYYY-MM-DD") from None
    if start >= end:
        raise _ce_invalid("Start date (and hour) should be before end date (and hour)")
    granularity = request.get("Granularity")
    if granularity not in ("DAILY", "MONTHLY"):
        raise _ce_invalid(f"Granularity {granularity} is not DAILY or MONTHLY (HOURLY needs opting in)")
    periods, day = [], start
    while day < end:
        if granularity == "DAILY":
            nxt = day + timedelta(days=1)
        else:
            nxt = date(day.year + day.month // 12, day.month % 12 + 1, 1)
        periods.append((day, min(nxt, end)))
        day = nxt
    return periods


def ce_group_key(group_by: list[dict], row: dict) -> tuple[str, ...]:
    keys = []
    for group in group_by:
        if group.get("Type") == "DIMENSION" and group.get("Key") in CE_DIMENSIONS:
            keys.append(row[CE_DIMENSIONS[group["Key"]]])
        elif group.get("Type") == "TAG" and group.get("Key"):
            keys.append(f"{group['Key']}${row['tags'].get(group['Key'], '')}")  # untagged: "key$"
        else:
            raise _ce_invalid(f"GroupBy {group} is not a DIMENSION this stand-in seeds or a TAG")
    return tuple(keys)


def _ce_amount(total: Decimal) -> dict:
    return {"Amount": str(total), "Unit": "USD"}


# -- Azure Cost Management query ------------------------------------------------------------------
# https://learn.microsoft.com/en-us/rest/api/cost-management/query/usage
AZURE_DIMENSIONS = ("ServiceName", "ResourceGroup", "ResourceLocation", "MeterCategory")  # what rows carry
AZURE_COST_COLUMNS = ("Cost", "PreTaxCost")  # both the cost in the billing currency
AZURE_TYPES = ("ActualCost", "AmortizedCost", "Usage")
AZURE_PAGE_ROWS = 2  # rows per answer, so the client has to follow nextLink


def azure_cost_row(day: str, service: str, cost: float, *, tags: dict | None = None, currency: str = "USD",
                   resource_group: str = "rg-train", location: str = "eastus") -> dict:  # fmt: skip
    """One day of one meter's cost, with the dimensions the query API can filter and group by."""
    return {"day": date.fromisoformat(day), "ServiceName": service, "ResourceGroup": resource_group,
            "ResourceLocation": location, "MeterCategory": service, "tags": tags or {}, "Cost": cost,
            "Currency": currency}  # fmt: skip


class AzureQueryError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _azure_bad(message: str) -> AzureQueryError:
    return AzureQueryError("BadRequest", f"Invalid query definition: {message}")


def azure_days(body: dict) -> tuple[date, date]:
    """The usage days a Custom timeframe covers: daily cost is dated at midnight, so a day counts when
    its date lies within timePeriod.from .. timePeriod.to (both inclusive)."""
    if body.get("type") not in AZURE_TYPES:
        raise _azure_bad(f"type must be one of {', '.join(AZURE_TYPES)}")
    if body.get("timeframe") != "Custom":  # MonthToDate etc. depend on today's date: not modelled
        raise _azure_bad(f"timeframe {body.get('timeframe')} is not modelled by this stand-in; send Custom")
    period = body.get("timePeriod") or {}
    try:
        first, last = _utc(period["from"]), _utc(period["to"])
    except (KeyError, TypeError, ValueError):
        raise _azure_bad("timePeriod with from and to is required for a Custom timeframe") from None
    if last < first:
        raise _azure_bad("timePeriod.from must not be after timePeriod.to")
    if last - first > timedelta(days=366):
        raise _azure_bad("The time period for pulling the data cannot exceed 1 year(s)")
    return first.date(), last.date()


def azure_matches(query_filter: dict | None, row: dict) -> bool:
    """QueryFilter: exactly one of and / or / dimensions / tags; comparisons use the operator In."""
    if query_filter is None:
        return True
    roots = [k for k in ("and", "or", "dimensions", "tags") if query_filter.get(k) is not None]
    if len(roots) != 1:
        raise _azure_bad("a filter has exactly one of and, or, dimensions, tags")
    root = roots[0]
    if root in ("and", "or"):
        if len(query_filter[root]) < 2:
            raise _azure_bad(f"'{root}' needs at least 2 expressions")
        combine = all if root == "and" else any
        return combine(azure_matches(f, row) for f in query_filter[root])
    comparison = query_filter[root]
    if comparison.get("operator") != "In":
        raise _azure_bad(f"operator {comparison.get('operator')} is not supported; use In")
    if root == "dimensions":
        if comparison.get("name") not in AZURE_DIMENSIONS:
            raise _azure_bad(f"dimension {comparison.get('name')} is not one this stand-in seeds")
        return row[comparison["name"]] in comparison.get("values", [])
    return row["tags"].get(comparison.get("name")) in comparison.get("values", [])


def azure_query_table(body: dict, rows: list[dict]) -> tuple[list[dict], list[list]]:
    """Columns and rows of a query: aggregations, then groupings, then UsageDate (Daily), then Currency
    (the shape of the doc's examples); rows summed per group, day and currency."""
    first, last = azure_days(body)
    dataset = body.get("dataset") or {}
    granularity = dataset.get("granularity")
    if granularity not in ("Daily", None):
        raise _azure_bad(f"granularity {granularity} is not modelled; use Daily or leave it out")
    aggregations = dataset.get("aggregation") or {}
    for name, agg in aggregations.items():
        if agg.get("function") != "Sum" or agg.get("name") not in AZURE_COST_COLUMNS:
            raise _azure_bad(f"aggregation {name} must be Sum of one of {', '.join(AZURE_COST_COLUMNS)}")
    groupings = dataset.get("grouping") or []
    for g in groupings:
        if g.get("type") != "Dimension" or g.get("name") not in AZURE_DIMENSIONS:
            raise _azure_bad(f"grouping {g} is not a Dimension this stand-in seeds")
    totals: dict[tuple, list[float]] = {}
    for row in rows:
        if first <= row["day"] <= last and azure_matches(dataset.get("filter"), row):
            key = (*(row[g["name"]] for g in groupings),
                   *([int(row["day"].strftime("%Y%m%d"))] if granularity == "Daily" else []), row["Currency"])  # fmt: skip
            sums = totals.setdefault(key, [0.0] * len(aggregations))
            for i in range(len(aggregations)):
                sums[i] += row["Cost"]  # Cost and PreTaxCost are the same figure here
    # An aggregation's column is named after the column it sums, not after its alias (the doc's examples).
    columns = [*({"name": agg["name"], "type": "Number"} for agg in aggregations.values()),
               *({"name": g["name"], "type": "String"} for g in groupings),
               *([{"name": "UsageDate", "type": "Number"}] if granularity == "Daily" else []),
               {"name": "Currency", "type": "String"}]  # fmt: skip
    ordered = sorted(totals.items(), key=lambda kv: (kv[0][-2:], kv[0]))
    return columns, [[*sums, *key] for key, sums in ordered]


class FakePriceApis(LoopbackServer):
    def __init__(
        self, faults: Faults | None = None, *, azure_cost_rows=None, cost_explorer_rows=None, token="t0ken"
    ):
        self.faults = faults or Faults()
        self.token = token
        self.requests: list[tuple[str, str]] = []  # (api, detail) in arrival order
        self._lock = threading.Lock()
        self._seen_once: set[str] = set()
        snapshot = read_offers(DATA_DIR / "offers.csv")
        self.aws_on_demand = {
            (o.region, o.instance_type): round(o.on_demand_usd_per_hour * PRICE_FACTOR, 5)
            for o in snapshot
            if o.cloud == "aws" and o.on_demand_usd_per_hour is not None
        }
        self.azure_items = self._azure_items([o for o in snapshot if o.cloud == "azure"])
        self.gcp_skus = self._gcp_skus(sorted({o.region for o in snapshot if o.cloud == "gcp"}))
        self.bigquery = BillingExport()  # tables added with self.bigquery.add_table(name, rows)
        self.bigquery_page_size = 2
        self._bq_results: dict[str, tuple[list[str], list[tuple]]] = {}
        self.azure_cost_rows = azure_cost_rows or []  # from azure_cost_row()
        self.cost_explorer_rows = cost_explorer_rows or []  # from cost_explorer_row()
        super().__init__(self._handler())

    # -- environment ------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Environment that points trainfleet at this server."""
        return {
            "AWS_ENDPOINT_URL_PRICING": f"{self.url}/aws-pricing",
            "AWS_ENDPOINT_URL_COST_EXPLORER": f"{self.url}/aws-ce",
            "TRAINFLEET_AZURE_PRICES_URL": f"{self.url}/azure/api/retail/prices",
            "TRAINFLEET_GCP_BILLING_URL": f"{self.url}/gcp/v1/services/6F81-5844-456A/skus",
            "TRAINFLEET_BIGQUERY_URL": f"{self.url}/bigquery/v2",
            "TRAINFLEET_AZURE_MANAGEMENT_URL": f"{self.url}/azure-mgmt",
        }

    def log(self, api: str, detail: str) -> None:
        with self._lock:
            self.requests.append((api, detail))

    def once(self, key: str) -> bool:
        with self._lock:
            if key in self._seen_once:
                return False
            self._seen_once.add(key)
            return True

    # -- fixtures ---------------------------------------------------------------------------------
    @staticmethod
    def _azure_items(offers) -> list[dict]:
        items = []
        for o in offers:
            series = o.instance_type.removeprefix("Standard_").replace("_", " ")
            common = {
                "currencyCode": "USD",
                "tierMinimumUnits": 0.0,
                "armRegionName": o.region,
                "location": o.region,
                "effectiveStartDate": "2024-01-01T00:00:00Z",
                "meterId": f"m-{o.instance_type}",
                "productId": "DZH318Z0BQ4L",
                "serviceName": "Virtual Machines",
                "serviceId": "DZH313Z7MMC8",
                "serviceFamily": "Compute",
                "unitOfMeasure": "1 Hour",
                "type": "Consumption",
                "isPrimaryMeterRegion": True,
                "armSkuName": o.instance_type,
            }
            linux, windows = f"Virtual Machines {series} Series", f"Virtual Machines {series} Series Windows"
            if o.on_demand_usd_per_hour is not None:
                od = round(o.on_demand_usd_per_hour * PRICE_FACTOR, 5)
                items += [
                    {**common, "retailPrice": od, "unitPrice": od, "meterName": series, "skuName": series, "productName": linux},
                    {**common, "retailPrice": od * 2, "unitPrice": od * 2, "meterName": series, "skuName": series, "productName": windows},
                    {**common, "retailPrice": od * 3, "unitPrice": od * 3, "meterName": series, "skuName": series,
                     "productName": linux, "effectiveStartDate": "2099-01-01T00:00:00Z"},  # announced future price
                    {**common, "retailPrice": od / 5, "unitPrice": od / 5, "meterName": f"{series} Low Priority",
                     "skuName": f"{series} Low Priority", "productName": linux},
                    {**common, "retailPrice": od * 0.6, "unitPrice": od * 0.6, "meterName": series, "skuName": series,
                     "productName": linux, "type": "Reservation", "reservationTerm": "1 Year"},
                ]  # fmt: skip
            if o.spot_usd_per_hour is not None:
                sp = round(o.spot_usd_per_hour * PRICE_FACTOR, 5)
                items += [
                    {**common, "retailPrice": sp, "unitPrice": sp, "meterName": f"{series} Spot", "skuName": f"{series} Spot", "productName": linux},
                    {**common, "retailPrice": sp * 2, "unitPrice": sp * 2, "meterName": f"{series} Spot", "skuName": f"{series} Spot", "productName": windows},
                ]  # fmt: skip
        return items

    @staticmethod
    def _gcp_skus(regions: list[str]) -> list[dict]:
        skus = []
        n = 0

        def sku(description: str, group: str, usage: str, region: str, usd: float, unit: str) -> dict:
            nonlocal n
            n += 1
            return {
                "name": f"services/6F81-5844-456A/skus/{n:04X}-0000-0000",
                "skuId": f"{n:04X}-0000-0000",
                "description": description,
                "category": {
                    "serviceDisplayName": "Compute Engine",
                    "resourceFamily": "Compute",
                    "resourceGroup": group,
                    "usageType": usage,
                },
                "serviceRegions": [region],
                "pricingInfo": [
                    {
                        "summary": "",
                        "pricingExpression": {
                            "usageUnit": unit,
                            "displayQuantity": 1,
                            "tieredRates": [{"startUsageAmount": 0, "unitPrice": _money(usd)}],
                            "usageUnitDescription": "hour" if unit == "h" else "gibibyte hour",
                            "baseUnit": "s" if unit == "h" else "By.s",
                            "baseUnitConversionFactor": 3600 if unit == "h" else 3865470566400,
                        },
                        "currencyConversionRate": 1,
                        "effectiveTime": "2026-11-01T00:00:00Z",
                    }
                ],
                "serviceProviderName": "Google",
                "geoTaxonomy": {"type": "REGIONAL", "regions": [region]},
            }

        for region in regions:
            where = f" running in {region}"
            for usage, prefix, f in (
                ("OnDemand", "", 1.0),
                ("Preemptible", "Spot Preemptible ", GCP_SPOT_FACTOR),
            ):
                for host in GCP_HOSTS:
                    skus.append(sku(f"{prefix}{host} Core{where}", "CPU", usage, region, GCP_CORE * f, "h"))
                    skus.append(
                        sku(f"{prefix}{host} Ram{where}", "RAM", usage, region, GCP_RAM * f, "GiBy.h")
                    )
                for gpu, usd in GCP_GPU.items():
                    skus.append(sku(f"{prefix}{gpu}{where}", "GPU", usage, region, usd * f, "h"))
            # Decoys the refresh must ignore: a 1-year commitment and a storage SKU.
            skus.append(sku(f"Commitment v1: Nvidia L4 GPU{where}", "GPU", "Commit1Yr", region, 0.01, "h"))
            storage = sku(f"Storage PD Capacity{where}", "SSD", "OnDemand", region, 0.0001, "GiBy.mo")
            storage["category"]["resourceFamily"] = "Storage"
            skus.append(storage)
        return skus

    # -- HTTP -------------------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body, headers: dict | None = None, content_type="application/json"):
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def do_GET(self):
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                if parts.path.startswith("/azure/api/retail/prices"):
                    return fake.azure_prices(self, query)
                if parts.path.startswith("/gcp/v1/services/6F81-5844-456A/skus"):
                    return fake.gcp_skus_page(self, query)
                if m := re.fullmatch(r"/bigquery/v2/projects/([^/]+)/queries/([^/]+)", parts.path):
                    return fake.bigquery_results(self, m.group(1), m.group(2), query)
                self._send(404, {"error": {"code": 404, "message": f"no route {parts.path}"}})

            def do_POST(self):
                parts = urllib.parse.urlsplit(self.path)
                body = self._body()
                if parts.path.startswith("/aws-pricing"):
                    return fake.aws_get_products(self, body)
                if parts.path.rstrip("/") == "/aws-ce":
                    return fake.cost_explorer(self, body)
                if m := re.fullmatch(r"/bigquery/v2/projects/([^/]+)/queries", parts.path):
                    return fake.bigquery_query(self, m.group(1), body)
                if m := re.fullmatch(
                    r"/azure-mgmt/subscriptions/([^/]+)/providers/Microsoft\.CostManagement/query", parts.path
                ):
                    return fake.azure_cost_query(
                        self, m.group(1), dict(urllib.parse.parse_qsl(parts.query)), body
                    )
                self._send(404, {"error": {"code": 404, "message": f"no route {parts.path}"}})

        return Handler

    # AWS Price List -------------------------------------------------------------------------------
    def aws_get_products(self, h, raw: bytes) -> None:
        target = h.headers.get("X-Amz-Target", "")
        if target != "AWSPriceListService.GetProducts":
            return h._send(400, {"__type": "UnknownOperationException", "message": target})
        req = json.loads(raw)
        filters = {f["Field"]: f["Value"] for f in req.get("Filters", [])}
        region, itype = filters.get("regionCode"), filters.get("instanceType")
        self.log("aws-pricing", f"{region} {itype} {req.get('NextToken', '')}")
        if region in self.faults.aws_throttled_regions:
            return h._send(400, {"__type": "ThrottlingException", "message": "Rate exceeded"},
                           {"x-amzn-ErrorType": "ThrottlingException"})  # fmt: skip
        wanted = {
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
        }
        price = self.aws_on_demand.get((region, itype))
        products = []
        if price is not None and all(filters.get(k) == v for k, v in wanted.items()):
            products.append(self._aws_product(region, itype, price))
        # Page 1 is empty with a NextToken (the real API does this too); page 2 holds the products.
        if not req.get("NextToken"):
            return h._send(200, {"FormatVersion": "aws_v1", "PriceList": [], "NextToken": "page-2"})
        h._send(200, {"FormatVersion": "aws_v1", "PriceList": products})

    @staticmethod
    def _aws_product(region: str, itype: str, price: float) -> str:
        sku = f"SKU{abs(hash((region, itype))) % 10**8:08d}"
        return json.dumps(
            {
                "product": {
                    "productFamily": "Compute Instance",
                    "attributes": {
                        "instanceType": itype,
                        "regionCode": region,
                        "operatingSystem": "Linux",
                        "tenancy": "Shared",
                        "preInstalledSw": "NA",
                        "capacitystatus": "Used",
                        "licenseModel": "No License required",
                        "servicecode": "AmazonEC2",
                    },  # fmt: skip
                    "sku": sku,
                },
                "serviceCode": "AmazonEC2",
                "terms": {
                    "OnDemand": {
                        f"{sku}.JRTCKXETXF": {
                            "priceDimensions": {
                                f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                    "unit": "Hrs",
                                    "endRange": "Inf",
                                    "description": f"${price} per On Demand Linux {itype} Instance Hour",
                                    "beginRange": "0",
                                    "pricePerUnit": {"USD": f"{price:.10f}"},
                                }
                            },
                            "sku": sku,
                            "effectiveDate": "2026-11-01T00:00:00Z",
                            "offerTermCode": "JRTCKXETXF",
                            "termAttributes": {},
                        }
                    }
                },
                "version": "20261101000000",
                "publicationDate": "2026-11-01T00:00:00Z",
            }
        )

    # Azure Retail Prices --------------------------------------------------------------------------
    def azure_prices(self, h, query: dict) -> None:
        flt = query.get("$filter", "")
        m = re.search(r"armRegionName eq '([^']+)'", flt)
        region = m.group(1) if m else ""
        skip = int(query.get("$skip", "0"))
        page = skip // self.faults.azure_page_size + 1
        self.log("azure-prices", f"{region} page {page}")
        if delay := self.faults.azure_delay_s.get(region):
            time.sleep(delay)
        if region in self.faults.azure_throttled_regions or (
            region in self.faults.azure_throttled_once and self.once(f"azure-429-{region}")
        ):
            return h._send(429, {"error": {"code": "TooManyRequests", "message": "Rate limit exceeded"}},
                           {"Retry-After": "0"})  # fmt: skip
        if region in self.faults.azure_malformed_regions and page == 2:
            return h._send(200, b'{"BillingCurrency": "USD", "Items": [{"retailPrice": 1.0, "armSkuName": ')
        items = [
            i
            for i in self.azure_items
            if (not region or i["armRegionName"] == region)
            and ("priceType eq 'Consumption'" not in flt or i["type"] == "Consumption")
        ]
        size = self.faults.azure_page_size
        chunk = items[skip : skip + size]
        nxt = None
        if skip + size < len(items):
            q = {**query, "$skip": str(skip + size)}
            nxt = f"{self.url}/azure/api/retail/prices?{urllib.parse.urlencode(q)}"
        h._send(200, {"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
                      "Items": chunk, "NextPageLink": nxt, "Count": len(chunk)})  # fmt: skip

    # GCP Cloud Billing Catalog --------------------------------------------------------------------
    def gcp_skus_page(self, h, query: dict) -> None:
        token = query.get("pageToken", "")
        start = int(token or 0)
        self.log("gcp-skus", f"page-start {start}")
        if query.get("key") != self.token and h.headers.get("Authorization") != f"Bearer {self.token}":
            return h._send(400, {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                                           "status": "INVALID_ARGUMENT"}})  # fmt: skip
        size = min(int(query.get("pageSize", "5000")), self.faults.gcp_page_size)
        if self.faults.gcp == "throttled":
            return h._send(429, {"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}},
                           {"Retry-After": "0"})  # fmt: skip
        if self.faults.gcp == "down":
            return h._send(503, {"error": {"code": 503, "message": "The service is currently unavailable.",
                                           "status": "UNAVAILABLE"}})  # fmt: skip
        if self.faults.gcp == "malformed" and start >= size:
            return h._send(200, b'{"skus": [{"name": "services/6F81-5844-456A/skus/')
        chunk = self.gcp_skus[start : start + size]
        body = {"skus": chunk}
        if start + size < len(self.gcp_skus):
            body["nextPageToken"] = str(start + size)
        h._send(200, body)

    # BigQuery jobs.query + jobs.getQueryResults ----------------------------------------------------
    # https://cloud.google.com/bigquery/docs/reference/rest/v2/jobs/query
    # https://cloud.google.com/bigquery/docs/reference/rest/v2/jobs/getQueryResults
    def _bq_auth(self, h) -> bool:
        if h.headers.get("Authorization") != f"Bearer {self.token}":
            h._send(401, {"error": {"code": 401, "message": "Request is missing required authentication credential.",
                                    "status": "UNAUTHENTICATED"}})  # fmt: skip
            return False
        return True

    def bigquery_query(self, h, project: str, raw: bytes) -> None:
        if not self._bq_auth(h):
            return
        req = json.loads(raw)
        sql = req.get("query", "")
        self.log("bigquery-query", sql)
        try:
            if req.get("useLegacySql", True) is not False:  # the documented default is legacy SQL
                raise _invalid_query(
                    "Invalid table name: legacy SQL does not read `project.dataset.table`, UNNEST or @parameters "
                    "[Try using standard SQL (https://cloud.google.com/bigquery/docs/reference/standard-sql/enabling-standard-sql)]"
                )
            if req.get("queryParameters") and req.get("parameterMode") != "NAMED":
                raise _invalid_query("named query parameters (@name) need parameterMode NAMED")
            names, rows = self.bigquery.query(sql, req.get("queryParameters", []), project)
        except BigQueryError as exc:
            return h._send(exc.code, exc.body())
        with self._lock:
            job = f"job_{len(self._bq_results)}"
            self._bq_results[job] = (names, rows)
        # Like BigQuery (which pages by response size too), answer at most bigquery_page_size rows a page.
        size = min(int(req.get("maxResults", 1000)), self.bigquery_page_size)
        self._bq_page(h, project, job, 0, size, first=True)

    def bigquery_results(self, h, project: str, job: str, query: dict) -> None:
        if not self._bq_auth(h):
            return
        self.log("bigquery-results", f"{job} {query.get('pageToken', '')}")
        if job not in self._bq_results:
            error = BigQueryError(
                404, "notFound", f"Not found: Job {project}:{query.get('location', 'US')}.{job}"
            )
            return h._send(404, error.body())
        size = min(int(query.get("maxResults", 1000)), self.bigquery_page_size)
        self._bq_page(h, project, job, int(query.get("pageToken", "0")), size, first=False)

    def _bq_page(self, h, project, job, start, size, first):
        names, rows = self._bq_results[job]
        fields = [{"name": n, "type": _bigquery_type([r[i] for r in rows]), "mode": "NULLABLE"}
                  for i, n in enumerate(names)]  # fmt: skip
        body = {
            "kind": "bigquery#queryResponse" if first else "bigquery#getQueryResultsResponse",
            "schema": {"fields": fields},
            "jobReference": {"projectId": project, "jobId": job, "location": "US"},
            "totalRows": str(len(rows)),
            "rows": [{"f": [_bigquery_cell(v) for v in row]} for row in rows[start : start + size]],
            "jobComplete": True,
            "cacheHit": False,
        }
        if start + size < len(rows):
            body["pageToken"] = str(start + size)
        h._send(200, body)

    # AWS Cost Explorer GetCostAndUsage (JSON 1.1) ---------------------------------------------------
    def cost_explorer(self, h, raw: bytes) -> None:
        target = h.headers.get("X-Amz-Target", "")
        if target != "AWSInsightsIndexService.GetCostAndUsage":
            return h._send(400, {"__type": "UnknownOperationException", "message": target})
        # Cost Explorer's endpoint is in us-east-1: a request signed for another region or service is refused.
        auth = h.headers.get("Authorization", "")
        if not re.match(r"AWS4-HMAC-SHA256 Credential=\w+/\d{8}/us-east-1/ce/aws4_request", auth):
            return h._send(400, {"__type": "InvalidSignatureException",
                                 "message": "Credential should be scoped to a valid region and service (us-east-1, ce)"})  # fmt: skip
        req = json.loads(raw)
        self.log("aws-ce", json.dumps(req, sort_keys=True))
        try:
            body = self._cost_and_usage(req)
        except CostExplorerError as exc:
            return h._send(400, {"__type": exc.kind, "message": exc.message})
        h._send(200, body)

    def _cost_and_usage(self, req: dict) -> dict:
        periods = ce_periods(req)
        metrics = req.get("Metrics") or []
        if not metrics or not set(metrics) <= CE_METRICS:
            raise _ce_invalid(f"Metrics must be some of {', '.join(sorted(CE_METRICS))}")
        group_by = req.get("GroupBy") or []
        if len(group_by) > 2:
            raise _ce_invalid("GroupBy takes at most 2 groupings")
        rows = [
            r for r in self.cost_explorer_rows if req.get("Filter") is None or ce_matches(req["Filter"], r)
        ]
        start = int(req.get("NextPageToken") or 0)
        results = []
        for first, end in periods[start : start + CE_PAGE_PERIODS]:
            inside = [r for r in rows if first <= date.fromisoformat(r["day"]) < end]
            totals: dict[tuple, dict[str, Decimal]] = {}
            for r in inside:
                sums = totals.setdefault(ce_group_key(group_by, r), dict.fromkeys(metrics, Decimal(0)))
                for m in metrics:
                    sums[m] += r.get(m, Decimal(0))
            result = {"TimePeriod": {"Start": first.isoformat(), "End": end.isoformat()}, "Total": {},
                      "Groups": [], "Estimated": False}  # fmt: skip
            if group_by:
                result["Groups"] = [{"Keys": list(k), "Metrics": {m: _ce_amount(v) for m, v in sums.items()}}
                                    for k, sums in sorted(totals.items())]  # fmt: skip
            else:
                result["Total"] = {
                    m: _ce_amount(sum((s[m] for s in totals.values()), Decimal(0))) for m in metrics
                }
            results.append(result)
        body = {"GroupDefinitions": group_by, "ResultsByTime": results, "DimensionValueAttributes": []}
        if start + CE_PAGE_PERIODS < len(periods):
            body["NextPageToken"] = str(start + CE_PAGE_PERIODS)
        return body

    # Azure Cost Management query --------------------------------------------------------------------
    def azure_cost_query(self, h, subscription: str, query: dict, raw: bytes) -> None:
        if h.headers.get("Authorization") != f"Bearer {self.token}":
            return h._send(
                401, {"error": {"code": "AuthenticationFailed", "message": "Authentication failed."}}
            )
        if not query.get("api-version"):
            return h._send(400, {"error": {"code": "MissingApiVersionParameter",
                                           "message": "The api-version query parameter (?api-version=) is required for all requests."}})  # fmt: skip
        req = json.loads(raw)
        self.log("azure-cost", json.dumps(req, sort_keys=True))
        try:
            columns, rows = azure_query_table(req, self.azure_cost_rows)
        except AzureQueryError as exc:
            return h._send(400, {"error": {"code": exc.code, "message": exc.message}})
        skip = int(query.get("$skiptoken", "0"))
        body = {
            "id": f"subscriptions/{subscription}/providers/Microsoft.CostManagement/query/q1",
            "name": "q1",
            "type": "Microsoft.CostManagement/query",
            "properties": {"nextLink": None, "columns": columns, "rows": rows[skip : skip + AZURE_PAGE_ROWS]},
        }
        if skip + AZURE_PAGE_ROWS < len(rows):
            q = {**query, "$skiptoken": str(skip + AZURE_PAGE_ROWS)}
            body["properties"]["nextLink"] = (
                f"{self.url}/azure-mgmt/subscriptions/{subscription}/providers/Microsoft.CostManagement/query?"
                + urllib.parse.urlencode(q)
            )
        h._send(200, body)


if __name__ == "__main__":  # python -m tests.fake_price_apis: serve until interrupted
    server = FakePriceApis().start()
    for k, v in server.env().items():
        print(f"export {k}={v}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


def isolated_env(home) -> dict[str, str]:
    """An environment that never touches the developer's ~/.config/trainfleet, ~/.aws or the internet:
    test credentials, fast retries. Callers add the servers' endpoints."""
    return {
        "TRAINFLEET_HOME": str(home),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
        "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # anything not pointed at a local server fails fast
        "TRAINFLEET_AWS_MAX_ATTEMPTS": "2",
        "TRAINFLEET_HTTP_ATTEMPTS": "3",
        "TRAINFLEET_HTTP_BACKOFF_S": "0.01",
        "GOOGLE_API_KEY": "",
        "GOOGLE_OAUTH_ACCESS_TOKEN": "",
        "AZURE_ACCESS_TOKEN": "",
        "GOOGLE_CLOUD_PROJECT": "",
        "PATH": str(
            home / "no-bin"
        ),  # no gcloud/az from the developer's machine (the CLI runs by absolute path)
    }
