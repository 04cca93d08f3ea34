"""How many network cards each EFA-capable instance type has: the fleet attaches one EFA interface per card.

An instance's EFA bandwidth is split across its network cards (p4d: 4 x 100 Gbps, p5: 32 x 100 Gbps);
an interface sits on one card, so a single EFA interface on card 0 gets a quarter of a p4d's and a
thirty-second of a p5's bandwidth. EC2 reports the count as NetworkInfo.MaximumNetworkCards
(DescribeInstanceTypes); https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html
shows the one-EFA-per-card launch. tests/test_aws_rules.py holds this table against EC2's own records
(vendored under tests/fixtures/aws_instance_types/ with provenance).
"""

from __future__ import annotations

MAX_NETWORK_CARDS: dict[str, int] = {
    "dl1.24xlarge": 4,
    "dl2q.24xlarge": 1,
    "g4dn.12xlarge": 1,
    "g4dn.16xlarge": 1,
    "g4dn.8xlarge": 1,
    "g4dn.metal": 1,
    "g5.12xlarge": 1,
    "g5.16xlarge": 1,
    "g5.24xlarge": 1,
    "g5.48xlarge": 1,
    "g5.8xlarge": 1,
    "g6.12xlarge": 1,
    "g6.16xlarge": 1,
    "g6.24xlarge": 1,
    "g6.48xlarge": 1,
    "g6.8xlarge": 1,
    "g6e.12xlarge": 1,
    "g6e.16xlarge": 1,
    "g6e.24xlarge": 2,
    "g6e.48xlarge": 4,
    "g6e.8xlarge": 1,
    "p3dn.24xlarge": 1,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5.4xlarge": 1,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
    "trn1.32xlarge": 8,
    "trn1n.32xlarge": 16,
    "trn2.3xlarge": 1,
    "trn2.48xlarge": 16,
}


def network_cards(instance_type: str) -> int:
    """Network cards of an EFA-capable type; 1 (one EFA interface, always valid) for a type not listed."""
    return MAX_NETWORK_CARDS.get(instance_type, 1)
