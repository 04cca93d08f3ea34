"""AWS components: network, checkpoint bucket, node role, spot fleet, Gaudi group, budget, billing export."""
