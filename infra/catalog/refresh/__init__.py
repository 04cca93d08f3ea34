"""`trainfleet catalog refresh`: today's prices from the clouds' price APIs into a user-level overlay.

aws.py (Price List API + EC2 spot price history), azure.py (Retail Prices API), gcp.py (Cloud Billing
Catalog API) each turn one region's API answers into `Offer` rows; run.py drives them region by region
and overlay.py writes the result atomically. The embedded snapshot stays the fallback for every row a
refresh did not touch.
"""
