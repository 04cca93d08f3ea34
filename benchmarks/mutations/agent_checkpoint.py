"""Planted bugs in the on-node agent's checkpoint commit and restore (complete_steps, upload_step, read_latest,
prune, verify_manifest, restore): each one loses training progress or restores a broken checkpoint.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once).
tests/test_agent_checkpoint.py calls the functions over the agent's S3Store (boto3/s3transfer) on moto's S3 server
(a real S3 API, read back with boto3); tests/test_agent_commit_restore.py calls them over an in-memory stand-in;
tests/test_agent_aws.py runs the agent as a process against moto's S3."""

MODULE = "agent-checkpoint"
# The protocol's rules one by one first, over real S3 then the stand-in (fast; -x stops at the first
# failure, so the slow end-to-end file only runs for a mutant both let through), then the agent as a process.
TESTS = [
    "tests/test_agent_checkpoint.py",
    "tests/test_agent_commit_restore.py",
    "tests/test_agent_sharded.py",
    "tests/test_agent_aws.py",
]
F = "templates/agent/trainfleet_agent/checkpoints.py"
STORES = "templates/agent/trainfleet_agent/stores.py"

MUTANTS = [
    {
        "file": F,
        "bug": "a step directory without COMPLETE (still being written) is uploaded as a checkpoint",
        "original": 'if m and os.path.isfile(os.path.join(ckpt_dir, name, "COMPLETE")):',
        "replacement": "if m:",
    },
    {
        "file": F,
        "bug": "local steps come in directory-listing order, so 'newest' may be an old step",
        "original": '        if m and os.path.isfile(os.path.join(ckpt_dir, name, "COMPLETE")):\n            out.append(int(m.group(1)))\n    return sorted(out)',
        "replacement": '        if m and os.path.isfile(os.path.join(ckpt_dir, name, "COMPLETE")):\n            out.append(int(m.group(1)))\n    return sorted(out, reverse=True)',
    },
    {
        "file": F,
        # (A bare trailing "\n" is understood even without strip(): STEP_RE's `$` matches before a final newline.)
        "bug": "LATEST with a Windows line ending or spaces around it is not understood, so restore ignores it",
        "original": 'm = STEP_RE.match(data.decode(errors="replace").strip())',
        "replacement": 'm = STEP_RE.match(data.decode(errors="replace"))',
    },
    {
        "file": F,
        "bug": "LATEST moves backwards when an older step finishes uploading after a newer one",
        "original": '        if current is not None and current >= step:\n            return current',
        "replacement": '        if False:\n            return current',
    },
    {
        "file": F,
        "bug": "LATEST is written before the step's manifest: a kill in between leaves LATEST naming an unverifiable step",
        "original": '    store.put_bytes(_key(prefix, step_name(step), "MANIFEST.json"), json.dumps(manifest, indent=1).encode())\n    latest = advance_latest(store, prefix, step)',
        "replacement": '    latest = advance_latest(store, prefix, step)\n    store.put_bytes(_key(prefix, step_name(step), "MANIFEST.json"), json.dumps(manifest, indent=1).encode())',
    },
    {
        "file": F,
        "bug": "LATEST holds the bare step number, which read_latest cannot parse",
        "original": 'if store.put_if(key, step_name(step).encode(), version):',
        "replacement": 'if store.put_if(key, str(step).encode(), version):',
    },
    {
        "file": F,
        "bug": "keep_last prunes the step LATEST names",
        "original": "keep = set(complete[:keep_last]) | {latest}",
        "replacement": "keep = set(complete[:keep_last])",
    },
    {
        "file": F,
        "bug": "keep_last counts steps newer than LATEST (still uploading), deleting verified older ones",
        "original": 'if "MANIFEST.json" in f and s <= latest),',
        "replacement": 'if "MANIFEST.json" in f),',
    },
    {
        "file": F,
        "bug": "prune deletes steps newer than the ones it keeps (an upload in progress)",
        "original": "doomed = [s for s in steps if s not in keep and s < oldest_kept]",
        "replacement": "doomed = [s for s in steps if s not in keep]",
    },
    {
        "file": F,
        "bug": "prune deletes the manifest last, so a half-deleted step still looks complete",
        "original": 'key=lambda n: n != "MANIFEST.json")',
        "replacement": 'key=lambda n: n == "MANIFEST.json")',
    },
    {
        "file": F,
        "bug": "keep_last is ignored: the bucket grows without bound",
        "original": "if keep_last and keep_last > 0:",
        "replacement": 'if name.startswith((".convert-",)) or name == ".tmp":',
    },
    {
        "file": F,
        "bug": "a truncated upload (size differs from the manifest) passes verification",
        "original": 'if listing.get(object_key(prefix, step, node, e["path"])) != e["size"]:',
        "replacement": 'if listing.get(object_key(prefix, step, node, e["path"])) is None:',
    },
    {
        "file": F,
        "bug": "a torn (unparseable) manifest crashes restore instead of falling back",
        "original": "    except ValueError:\n        return None\n    problem = manifest_problem(manifest)",
        "replacement": "    except ValueError:\n        raise\n    problem = manifest_problem(manifest)",
    },
    {
        "file": F,
        "bug": "a manifest path with .. is written outside the destination (as root, at boot)",
        "original": '    return all(part not in ("", ".", "..") for part in path.split("/"))',
        "replacement": '    return all(part not in ("", ".") for part in path.split("/"))',
    },
    {
        "file": F,
        "bug": "a malformed manifest ([] or a null entry) crashes restore and boot retries forever",
        "original": '    if not isinstance(manifest, dict):\n        return "not an object with a list of files"',
        "replacement": '    if False:\n        return "not an object with a list of files"',
    },
    {
        "file": F,
        "bug": "a link in the temp folder carries a download outside the destination",
        "original": "        if not os.path.realpath(out).startswith(os.path.realpath(tmp) + os.sep):",
        "replacement": "        if not os.path.abspath(out).startswith(os.path.abspath(tmp) + os.sep):",
    },
    {
        "file": STORES,
        # botocore itself turns a 200 with <Error> into a retried error (tests/test_agent_checkpoint.py puts a proxy
        # answering so in front of moto); the bug that loses it is the store swallowing the SDK's verdict.
        "bug": "S3 CompleteMultipartUpload answering 200 with <Error> is logged durable: put_file ignores the SDK's error "
        "and reports the checksum of whatever object HeadObject finds (an older one under the same key)",
        "original": "            future.result()  # the SDK's verdict: a failed part or completion (even a 200 with <Error>) raises",
        "replacement": "            try:\n                future.result()\n            except Exception as e:  # noqa: BLE001\n"
        '                log("upload_error", key=key, error=str(e)[:200])',
    },
    {
        "file": F,
        "bug": "when LATEST's step does not verify, restore gives up instead of using the previous step",
        "original": "candidates = [latest] + [s for s in candidates if s < latest]",
        "replacement": "candidates = [latest]",
    },
    {
        "file": F,
        "bug": "a download whose checksum differs from the manifest is restored",
        "original": 'if not store.download(key, out, entry_checksum(e)):',
        "replacement": 'if not (store.download(key, out, entry_checksum(e)) or True):',
    },
    {
        "file": F,
        "bug": "a half-restored step directory (no COMPLETE) is taken as already present",
        "original": "complete = marker is not None  # only a complete folder's files are reused",
        "replacement": "complete = os.path.isdir(final)",
    },
    {
        "file": F,
        # (Writing COMPLETE into the temp dir before the rename was equivalent: a kill leaves only a
        # .restore-* dir, which the next restore removes.)
        "bug": "a half-restored step directory left by a killed restore makes every later restore fail",
        "original": "    shutil.rmtree(final, ignore_errors=True)\n    os.replace(tmp, final)",
        "replacement": "    os.replace(tmp, final)",
    },
    {
        "file": F,
        "bug": "restore picks the oldest step in the bucket when LATEST is missing",
        "original": "candidates = sorted(bucket_steps(listing, prefix), reverse=True)",
        "replacement": "candidates = sorted(bucket_steps(listing, prefix))",
    },
    {
        "file": F,
        "bug": "a LATEST that is not UTF-8 (Windows PowerShell's `>` writes UTF-16) crashes restore and every commit",
        "original": 'm = STEP_RE.match(data.decode(errors="replace").strip())',
        "replacement": "m = STEP_RE.match(data.decode().strip())",
    },
    {
        "file": F,
        "bug": "temp dirs left by killed restores are never removed: a node restarting over and over fills its disk",
        "original": 'if name.startswith((".restore-step-", ".convert-")) or name == ".tmp":',
        "replacement": "if False:",
    },
    # Sharded checkpoints (issue 13 #1, #2): tests/test_agent_sharded.py.
    {
        "file": F,
        "bug": "rank 0 commits a step while another node's part is still missing",
        "original": "        if part is None:\n            return None",
        "replacement": "        if part is None:\n            continue",
    },
    {
        "file": F,
        "bug": "a node restores every rank's ZeRO shard (the whole checkpoint on every node)",
        "original": '        if ZERO_SHARD_RE.search(path):\n            return False',
        "replacement": '        if False:\n            return False',
    },
    {
        "file": F,
        "bug": "a restored step is uploaded again as this node's part (node 1 re-uploads node 0's model states)",
        "original": '    if who["restored"]:\n        log("sync_skip"',
        "replacement": '    if False:\n        log("sync_skip"',
    },
    {
        "file": F,
        "bug": "local pruning deletes the newest steps instead of the oldest",
        "original": "doomed = complete_steps(ckpt_dir)[:-keep_last]",
        "replacement": "doomed = complete_steps(ckpt_dir)[-keep_last:]",
    },
    {
        "file": F,
        "bug": "a PART.json naming another node is accepted as this node's part",
        "original": '    if problem is None and (part.get("step"), part.get("node")) != (step, node):',
        "replacement": "    if False:",
    },
    {
        "file": F,
        "bug": "a step saved by another node count is restored (DeepSpeed then refuses the ZeRO state)",
        "original": "(node_rank >= saved_by or (nodes is not None and nodes != saved_by))",
        "replacement": "(node_rank >= saved_by)",
    },
]
