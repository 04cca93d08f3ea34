"""The Pulumi program (`pulumi up -s <env>`): read the stack config, declare every component, export.

Thin on purpose: validation is StackConfig's, composition is `infra.program.declare`'s.
"""

import sys
from pathlib import Path

# Run by Pulumi as a directory program (main: infra/), infra/ itself is first on sys.path: take it off
# (its aws/, gcp/, config.py must not shadow top-level modules) and put the repository root first, so
# the checkout being deployed is the code that runs even when an older trainfleet is installed in the
# stack's virtualenv (which then only supplies the dependencies).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import pulumi  # noqa: E402

from infra.config import NAMESPACE, SECTIONS, StackConfig  # noqa: E402
from infra.errors import TrainfleetError  # noqa: E402
from infra.program import declare  # noqa: E402


def read_sections() -> dict:
    config = pulumi.Config(NAMESPACE)
    return {key: value for key in SECTIONS if (value := config.get_object(key)) is not None}


def main() -> None:
    try:
        stack_config = StackConfig.from_sections(read_sections())
    except TrainfleetError as exc:
        # One line in `pulumi up`'s diagnostics, no Python traceback.
        raise pulumi.RunError(f"stack {pulumi.get_stack()}: {exc.message}") from None
    for name, value in declare(pulumi.get_stack(), stack_config).items():
        pulumi.export(name, value)


main()
