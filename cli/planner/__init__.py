"""The planner: pure models (workload, memory, throughput, reliability) and an exact optimizer over them.

Each model is a module of pure functions over plain dataclasses; the only I/O is the calibration
loader (`calibration.load_rows`), which reads the llm-foundry table embedded in the catalog.
"""
