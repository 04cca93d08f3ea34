"""GCP components: network, checkpoint bucket, node service account, spot fleet, budget, billing export."""
