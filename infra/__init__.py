"""trainfleet's deployable side: stack-config schema, catalog, user-data rendering and the Pulumi program."""
