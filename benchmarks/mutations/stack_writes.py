"""Planted bugs in how trainfleet writes files users keep (stack files through infra/stack_file.py and
infra/atomic.py, read back through infra/strict_yaml.py, and `plan --write-stack` merging a plan into one through
cli/planner/stack.py): each one loses or leaks a user's settings, or leaves half a file.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "stack-writes"
TESTS = ["tests/test_stack_writes.py", "tests/test_no_data_lost.py"]
# plus the one CLI test that writes a new stack file (test_cli_plan.py as a whole takes over a minute)
PLAN_TESTS = [
    "tests/test_stack_writes.py",
    "tests/test_no_data_lost.py",
    "tests/test_cli_plan.py::test_write_stack_writes_a_valid_stack_and_refuses_to_overwrite",
]
ATOMIC = "infra/atomic.py"
STACK_FILE = "infra/stack_file.py"
STRICT_YAML = "infra/strict_yaml.py"
YAML_TESTS = [*TESTS, "tests/test_strict_yaml.py"]
PLAN = "cli/planner/stack.py"

MUTANTS = [
    # infra/atomic.py: every file trainfleet writes
    {
        "file": ATOMIC,
        "bug": "an existing 0600 file (secrets) is rewritten world-readable 0644",
        "original": "bits = mode if mode is not None else (stat.S_IMODE(st.st_mode) if st is not None else _default_mode())",
        "replacement": "bits = mode if mode is not None else _default_mode()",
    },
    {
        # Safe to plant since tests/test_no_data_lost.py writes to a /dev/full node of its own (mknod in tmp).
        "file": ATOMIC,
        "bug": "a device (--output /dev/stdout, /dev/full) is replaced by a regular file",
        "original": "if st is not None and not stat.S_ISREG(st.st_mode):",
        "replacement": "if False:",
    },
    {
        "file": ATOMIC,
        "bug": "a read-only file is silently replaced",
        "original": "if st is not None and not os.access(target, os.W_OK):",
        "replacement": "if False:",
    },
    {
        "file": ATOMIC,
        "bug": "a symlinked file is replaced by a regular file (the link is lost)",
        "original": "return Path(os.path.realpath(path))",
        "replacement": "return path",
    },
    {
        "file": ATOMIC,
        "bug": "the data is not fsynced before the rename: a power cut can leave an empty file",
        "original": "_write_all(fd, payload)\n            os.fsync(fd)",
        "replacement": "_write_all(fd, payload)",
    },
    {
        "file": ATOMIC,
        "bug": "a short write is not retried: a large file is silently truncated",
        "original": "while view:",
        "replacement": "if view:",
    },
    {
        "file": ATOMIC,
        "bug": "a failed write leaves its .tmp file behind",
        "original": "os.unlink(tmp)",
        "replacement": "pass",
    },
    {
        "file": ATOMIC,
        "bug": "the temp file is made in /tmp, so the rename crosses file systems and fails",
        "original": "suffix=TMP_SUFFIX, dir=target.parent)",
        "replacement": "suffix=TMP_SUFFIX, dir=None)",
    },
    # Not planted: "a device is replaced by a rename" - the tests write to /dev/full as root, so that mutant
    # replaced the machine's /dev/full with a regular file (the tool now checks the devices after each run).
    {
        "file": ATOMIC,
        "bug": "a stack file in a folder that does not exist yet fails instead of creating the folder",
        "original": "target.parent.mkdir(parents=True, exist_ok=True)",
        "replacement": "pass",
    },
    # infra/stack_file.py: editing an existing stack file in place
    {
        "file": STACK_FILE,
        "bug": "the backup of the previous stack file is empty",
        "original": 'write_file(backup, original, what="backup of the stack file", mode=mode)',
        "replacement": 'write_file(backup, b"", what="backup of the stack file", mode=mode)',
    },
    {
        "file": STACK_FILE,
        "bug": "the backup of a 0600 stack file is world-readable",
        "original": "mode = target.stat().st_mode & 0o7777",
        "replacement": "mode = 0o644",
    },
    {
        "file": STACK_FILE,
        "bug": "two edits in the same second share one backup name: the first backup is overwritten",
        "original": "while candidate.exists() or candidate.is_symlink():",
        "replacement": "while False:",
    },
    {
        "file": STACK_FILE,
        "bug": "an edit that does not validate is written anyway",
        "original": 'raise ConfigError(f"{path}: {exc}; nothing was written") from None',
        "replacement": "pass",
    },
    {
        "file": STACK_FILE,
        "bug": "a splice that changed a value is shipped",
        "original": "(not _same_document(result, dumped) or _comments(text) - _comments(result))",
        "replacement": "(_comments(text) - _comments(result))",
    },
    {
        "file": STACK_FILE,
        "bug": "a splice that lost a comment line is shipped",
        "original": "(not _same_document(result, dumped) or _comments(text) - _comments(result))",
        "replacement": "(not _same_document(result, dumped))",
    },
    {
        "file": STACK_FILE,
        "bug": "a Windows-edited (CRLF) stack file gets mixed line ends",
        "original": 'if old_lines and old_lines[0].endswith("\\r\\n"):',
        "replacement": "if False:",
    },
    # infra/strict_yaml.py: the loader of every stack file
    {
        "file": STRICT_YAML,
        "tests": YAML_TESTS,
        "bug": "a key given twice in a stack file is read silently (YAML keeps the last)",
        "original": "if key in seen:",
        "replacement": "if False:",
    },
    {
        "file": STRICT_YAML,
        "tests": YAML_TESTS,
        "bug": "a stack file nested past libyaml's limit is called a syntax error instead of too deep",
        "original": "if problem == LIBYAML_TOO_DEEP:",
        "replacement": "if problem == LIBYAML_TOO_DEEP.upper():",
    },
    # cli/planner/stack.py: plan --write-stack into an existing file
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "re-planning renames the job, so every deployed resource is replaced",
        "original": 'if "name" not in job:',
        "replacement": "if True:",
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "a plan without a deadline keeps the old deadline_hours",
        "original": '"lora_rank", "deadline_hours",',
        "replacement": '"lora_rank",',
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "moving the fleet to another region keeps the old region's AMI and network",
        "original": "*(FLEET_TIED_TO_REGION if moved else ())",
        "replacement": "*(FLEET_TIED_TO_REGION if False else ())",
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "a plan that is not mixed keeps the on-demand base of a mixed fleet",
        "original": 'if plan_fleet["purchase"] != "mixed":',
        "replacement": "if False:",
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "the planned instance type stays among its own fallbacks",
        "original": 'fallbacks.remove(plan_fleet["instance_type"])',
        "replacement": "pass",
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        # (Rewriting every key was equivalent: ruamel keeps a re-set key's comment and quoting.)
        "bug": "a key already in the file is never updated: re-planning keeps the old node count and type",
        "original": "if key in mapping and plain_data(old) == value:",
        "replacement": "if key in mapping:",
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "a secret (secure:) provider region is overwritten with a plain one",
        "original": "if isinstance(config.get(key), dict):  # a secret",
        "replacement": "if False:  # a secret",
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "a plan that needs optimizer offload writes offload_optimizer: none (OOM at step 1)",
        "original": '"offload_optimizer": "cpu" if s.sharding.offload_optimizer else "none",',
        "replacement": '"offload_optimizer": "none",',
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "a new stack file gets no provider region key",
        "original": "return config, {PROVIDER_REGION_KEY[c.offer.cloud]: c.offer.region}\n\n\n#",
        "replacement": "return config, {}\n\n\n#",
    },
    {
        "file": PLAN,
        "tests": PLAN_TESTS,
        "bug": "a spot plan over several zones is pinned to its first zone",
        "original": '"zones": list(c.zones),',
        "replacement": '"zones": list(c.zones)[:1],',
    },
]
