"""Planted bugs in the cost diff (two estimates matched by URN, and the git base side): each one shows a
reviewer the wrong delta, hides a deletion, or reads the wrong base file.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "preview-diff"
# test_no_data_lost.py holds the git-ref and symlink cases of the base side
TESTS = [
    "tests/test_diff_rows.py",
    "tests/test_diff_stacks.py",
    "tests/test_diff_comment.py",
    "tests/test_preview_pulumi_json.py",
    "tests/test_no_data_lost.py",
    "tests/test_comment_render.py",
    "tests/test_cost_comment_real_previews.py",
    "tests/test_preview_documents_complete.py",
]
F = "cli/preview/diff.py"
MD = "cli/preview/markdown.py"
PJ = "cli/preview/pulumi_json.py"
DOC = "cli/preview/document_config.py"

MUTANTS = [
    {
        "file": F,
        "bug": "a resource's delta is base minus head: a cost increase shows as a saving",
        "original": "b, h = self.base_monthly, self.head_monthly",
        "replacement": "h, b = self.base_monthly, self.head_monthly",
    },
    {
        "file": F,
        "bug": "an unknown cost on one side is guessed as $0 instead of leaving the delta unknown",
        "original": "b, h = self.base_monthly, self.head_monthly\n        return None if b is None or h is None else h - b",
        "replacement": "b, h = self.base_monthly, self.head_monthly\n        return (h or 0.0) - (b or 0.0)",
    },
    {
        "file": F,
        "bug": "a resource's job delta uses the monthly cost of the head side",
        "original": "h = 0.0 if self.head is None else self.head.job_cost",
        "replacement": "h = 0.0 if self.head is None else self.head.monthly_cost",
    },
    {
        "file": F,
        "bug": "the total monthly delta is the head's total, not head minus base",
        "original": "return self.head.monthly_total - self.base.monthly_total",
        "replacement": "return self.head.monthly_total",
    },
    {
        "file": F,
        "bug": "the diff is called complete when only the head side is complete",
        "original": '"complete": self.base.complete and self.head.complete,',
        "replacement": '"complete": self.head.complete,',
    },
    {
        "file": F,
        "bug": "the count of changes whose cost is unknown includes unchanged resources",
        "original": 'return [r for r in self.rows if r.op != "same" and r.delta is None]',
        "replacement": "return [r for r in self.rows if r.delta is None]",
    },
    {
        "file": F,
        "bug": "a deleted resource vanishes from the diff (its saving is never shown)",
        "original": "urns = sorted(head_by) + sorted(u for u in base_by if u not in head_by)",
        "replacement": "urns = sorted(head_by)",
    },
    {
        "file": F,
        "bug": "a resource whose inputs changed is shown as unchanged",
        "original": 'op = "update" if changes else "same"',
        "replacement": 'op = "same"',
    },
    {
        "file": F,
        "bug": "a new resource is labelled as deleted",
        "original": 'op = "create"',
        "replacement": 'op = "delete"',
    },
    {
        "file": F,
        "bug": "the preview's own op (replace) is ignored: a replacement shows as an update",
        "original": "if ops and urn in ops:",
        "replacement": "if False:",
    },
    {
        "file": F,
        "bug": "inputs added or removed between base and head are not listed as changes",
        "original": "for k in sorted(set(a) | set(b))",
        "replacement": "for k in sorted(set(a) & set(b))",
    },
    {
        "file": F,
        "bug": "protobuf's 2.0 and the program's 2 are listed as a changed input",
        "original": "out[prefix] = int(value)  # protobuf",
        "replacement": "out[prefix] = value  # protobuf",
    },
    {
        "file": F,
        "bug": "a stack file symlinked in git is diffed against the link's text, not the file",
        "original": 'if not entry.startswith("120000 "):',
        "replacement": "if True:",
    },
    {
        "file": F,
        "bug": "a symlink leaving the repository is followed at the base ref",
        "original": 'if joined == ".." or joined.startswith("../") or joined.startswith("/"):',
        "replacement": 'if joined.startswith("/"):',
    },
    {
        "file": F,
        "bug": "a stack file the pull request adds is read as an empty base instead of absent",
        "original": "if listed.returncode == 0 and not entry:\n            return None",
        "replacement": 'if listed.returncode == 0 and not entry:\n            return ""',
    },
    # issue 33: the comment a reviewer signs
    {
        "file": F,
        "bug": "a change is the exact change rounded, not the difference of the figures shown (off by a cent)",
        "original": "return money_round(money_round(head) - money_round(base))",
        "replacement": "return money_round(head - base)",
    },
    {
        "file": F,
        "bug": "a fleet's expected job change is base minus head: a saving reads as a rise",
        "original": "return cents_delta(_job_usd(self.base), _job_usd(self.head))",
        "replacement": "return cents_delta(_job_usd(self.head), _job_usd(self.base))",
    },
    {
        "file": PJ,
        "bug": "a resource one preview document leaves out is shown as added, though the other proves it deployed",
        "original": 'added = [Step("same", urn, res, res, []) for urn, res in deployed(other).items() if urn not in listed]',
        "replacement": "added = []",
    },
    {
        "file": DOC,
        "bug": "a document's object config values (JSON text) are not parsed, so its fleets are never known",
        "original": 'if isinstance(raw, str) and raw[:1] in ("{", "["):',
        "replacement": "if False:",
    },
    {
        "file": MD,
        "bug": "usage nobody set shows as a cost line of $0.00 instead of its unit price",
        "original": "if c.usage_based and c.quantity == 0 and c.unit_price:\n        return _depends(c)",
        "replacement": "if False:\n        return _depends(c)",
    },
    {
        "file": F,
        "bug": "the rows are in registration order: the comment changes when the engine registers in another order",
        "original": "urns = sorted(head_by) + sorted(u for u in base_by if u not in head_by)",
        "replacement": "urns = list(head_by) + [u for u in base_by if u not in head_by]",
    },
    {
        "file": MD,
        "bug": "the list price over job_hours shows even with the default month: the monthly figure twice",
        "original": 'if hours is None or hours.source.startswith("default"):',
        "replacement": "if hours is None:",
    },
]
