"""`python -m cli` runs the trainfleet command (same as the console script)."""

from cli.app import main

main()
