"""trainfleet's command line: what is computed and shown (planner, preview, catalog views)."""
