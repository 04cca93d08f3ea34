"""trainfleet's policy pack: `pulumi preview --policy-pack policy` (see policy/README.md).

Thin on purpose: the policies live in trainfleet_policies/, one module per concern.
"""

import sys
from pathlib import Path

# Pulumi runs the pack as a directory program (this folder first on sys.path). The pricing and the limits
# the policies share with the program (infra/, cli/) come from this checkout: put the repository root next.
_HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(_HERE.parent))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402
from trainfleet_policies import PACK_NAME, all_policies  # noqa: E402

PolicyPack(
    name=PACK_NAME,
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=all_policies(),
)
