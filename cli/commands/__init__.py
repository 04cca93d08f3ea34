"""One module per command group; each registers its commands on `cli.app.app` when imported."""
