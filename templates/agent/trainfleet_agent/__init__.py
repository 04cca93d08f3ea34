"""trainfleet on-node agent: spot-notice watcher, checkpoint sync, restore, peer discovery, scale-to-zero.

One module per concern: metadata (per cloud), notices, stores (object stores), checkpoints (commit and
restore), watch (the watch loop), membership (peers, ranks, scale-to-zero), cli. Shipped to nodes as one
zipapp, `trainfleet_agent.pyz` (built by infra/agent_artifact.py, sha256-pinned in the user-data), and run
as ``python3 trainfleet_agent.pyz <command> ...``. The contract with the trainer, the boot script and the
bucket is templates/agent/PROTOCOL.md.
"""
