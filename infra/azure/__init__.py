"""Azure components: network, checkpoint storage, node identity, spot scale set, budget, billing export."""
