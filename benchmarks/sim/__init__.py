"""The scale simulation's parts (benchmarks/scale_sim.py is the entry point).

clock       a virtual clock that runs threads one at a time, in virtual-time order (discrete events)
content     sparse checkpoint files and the identity of the bytes each one stands for
shapes      each cloud's object store in numbers: links, request limits, SDK retries (sourced rates)
store       the shaped object store: one bucket, one ObjectStore per node over that node's link
agent       the real agent (trainfleet_agent) wired to the clock, the store and a scripted metadata service
trainer     the training job: steps, checkpoint requests, DeepSpeed's files saved on every node
fleet       nodes (folders, agent, store), started, lost, replaced
scenarios   what the simulation runs: checkpoints, notices, losses, restarts, shrink and grow-back
invariants  what must hold on every run
report      the tables, beside the planner's figures
"""
