"""Rules: aws. See infra/rules/__init__.py."""

from __future__ import annotations

from infra.rules import Finding, rule, where  # noqa: F401
