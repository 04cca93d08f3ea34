"""The embedded catalog: prices, interruption rates and hardware facts, each with its provenance."""

from infra.catalog.loader import Catalog, default_catalog, load_catalog
from infra.catalog.model import INTERRUPTION_BUCKETS, Accelerator, Offer

__all__ = ["Accelerator", "Catalog", "INTERRUPTION_BUCKETS", "Offer", "default_catalog", "load_catalog"]
