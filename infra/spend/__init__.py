"""`trainfleet spend`: what a stack actually cost, from the clouds' billing APIs, beside the plan's estimate.

Every resource a stack declares carries the tag trainfleet-stack=<stack> (label on GCP); cost is read
by that tag: AWS Cost Explorer (aws.py), the stack's BigQuery billing export on GCP (gcp.py) and the
Azure Cost Management query API (azure.py), grouped by service and day (report.py).
"""
