"""Pricing functions, one per Pulumi type token (the Infracost pattern); importing this registers them all."""

from cli.preview.pricing import aws, azure, gcp  # noqa: F401  (register the per-cloud functions)
from cli.preview.pricing.base import (
    FREE_TYPES,
    PRICERS,
    PricingContext,
    free,
    known_types,
    price_all,
    price_resource,
)

free(
    "random values and local helpers carry no charge",
    "random:index/randomId:RandomId",
    "random:index/randomString:RandomString",
    "random:index/randomPet:RandomPet",
    "random:index/randomPassword:RandomPassword",
    "pulumi:providers:random",
)

__all__ = ["FREE_TYPES", "PRICERS", "PricingContext", "known_types", "price_all", "price_resource"]
