"""Planted bugs in the Pulumi program and in the provider rules that guard it (issue 12): each one is a stack
a cloud would refuse, or a fleet that misbehaves once deployed, that the program or `stacks check` would let
through. The first group puts issue 12's bugs back in the program; the second weakens a rule.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "provider-rules"
TESTS = ["tests/test_provider_rules.py", "tests/test_infra_stacks.py", "tests/test_infra_components.py"]

MUTANTS = [
    # ---- the program, as issue 12 found it
    {
        "file": "infra/program.py",
        "bug": "a multi-node AWS fleet without zones gets every catalog zone: CreateAutoScalingGroup refuses it",
        "original": 'return [priced[0][1] if priced and fleet.purchase != "on-demand" else zones[0]]',
        "replacement": "return zones",
    },
    {
        "file": "infra/aws/fleet.py",
        "bug": "one EFA interface on card 0: a p5 gets 1/32 of its network bandwidth",
        "original": "for card in range(count)",
        "replacement": "for card in range(1)",
    },
    {
        "file": "infra/aws/fleet.py",
        "bug": "the public-IP setting on every interface of a multi-card template: EC2 refuses the launch",
        "original": 'associate_public_ip_address="false" if count == 1 else None,',
        "replacement": 'associate_public_ip_address="false",',
    },
    {
        "file": "infra/aws/iam.py",
        "bug": "nodes may reconfigure their own group (raise MaxSize, swap the launch template)",
        "original": '                    "autoscaling:SetDesiredCapacity",\n',
        "replacement": '                    "autoscaling:SetDesiredCapacity",\n                    "autoscaling:UpdateAutoScalingGroup",\n',
    },
    {
        "file": "infra/aws/fleet.py",
        "bug": "pulumi up --refresh relaunches an AWS fleet the job scaled to zero",
        "original": 'ignore_changes=["desiredCapacity"]',
        "replacement": 'capacity=args.nodes',
    },
    {
        "file": "infra/gcp/fleet.py",
        "bug": "pulumi up --refresh relaunches a GCP fleet the job scaled to zero",
        "original": 'ignore_changes=["targetSize"]',
        "replacement": "ignore_changes=[]",
    },
    {
        "file": "infra/azure/fleet.py",
        "bug": "pulumi up --refresh relaunches an Azure fleet the job scaled to zero",
        "original": 'capacity=capacity_to_send(args.resource_group_name, args.group_name, self)',
        "replacement": "ignore_changes=[]",
    },
    {
        "file": "infra/azure/storage.py",
        "bug": "the storage account's logical name keeps its hyphen: azure-native names it adev-ckpt<hex>, refused",
        "original": "    if len(cleaned) <= ACCOUNT_LOGICAL_MAX:\n        return cleaned",
        "replacement": "    if len(cleaned) <= ACCOUNT_LOGICAL_MAX:\n        return name",
    },
    {
        "file": "infra/azure/identity.py",
        "bug": "the blob condition limits List Blobs by a path it does not carry: restore and prune get 403",
        "original": "[f\"!(ActionMatches{{'{read}'}} AND NOT SubOperationMatches{{'{LIST}'}})\"]",
        "replacement": "[f\"!(ActionMatches{{'{read}'}})\"]",
    },
    {
        "file": "infra/gcp/iam.py",
        "bug": "the group permissions are conditioned on the instance group manager: resize and peers denied",
        "original": "group_condition: pulumi.Input[str] | None = None",
        "replacement": (
            "group_condition: pulumi.Input[str] | None = "
            "f'resource.name.endsWith(\"/instanceGroupManagers/{args.group_name}\")'"
        ),
    },
    {
        "file": "infra/aws/budget.py",
        "bug": "the budget's cost allocation tag is declared inactive: the budget never alerts",
        "original": 'status="Active",',
        "replacement": 'status="Inactive",',
    },
    {
        "file": "infra/mock_runtime.py",
        "bug": "the mock strips what azure-native keeps when it autonames, hiding an invalid account name",
        "original": "rname = name if kind in _AZ_CHILD_KINDS else name + _short_hash(name, n=8)",
        "replacement": 'rname = name if kind in _AZ_CHILD_KINDS else re.sub("[^a-z0-9]", "", name.lower()) + _short_hash(name, n=8)',
    },
    # ---- the rules, weakened
    {
        "file": "infra/rules/aws.py",
        "bug": "a cluster placement group over two zones passes the rule",
        "original": "        elif len(zones) > 1:",
        "replacement": "        elif len(zones) > 2:",
    },
    {
        "file": "infra/rules/aws.py",
        "bug": "too few EFA interfaces pass the rule as long as card 0 has one",
        "original": "            if indices != list(range(cards)):",
        "replacement": "            if indices[:1] != [0]:",
    },
    {
        "file": "infra/rules/names.py",
        "bug": "a storage account name with a hyphen passes the name rule",
        "original": '"name", r"[a-z0-9]{3,24}",',
        "replacement": '"name", r"[a-z0-9-]{3,24}",',
    },
    {
        "file": "infra/rules/abac.py",
        "bug": "an attribute the request does not carry is taken as a match: path-only conditions pass",
        "original": "                    raise NotEvaluable(attr)",
        "replacement": "                    return True",
    },
    {
        "file": "infra/rules/gcp.py",
        "bug": "IAM conditions on instance group managers are taken as supported",
        "original": '    "compute.googleapis.com/Instance",\n    "compute.googleapis.com/InstanceTemplate",',
        "replacement": (
            '    "compute.googleapis.com/Instance",\n    "compute.googleapis.com/InstanceGroupManager",\n'
            '    "compute.googleapis.com/InstanceTemplate",'
        ),
    },
    {
        "file": "infra/rules/azure.py",
        "bug": "deleteOption on a Uniform scale set passes the rule",
        "original": 'if mode == "Uniform" and "deleteOption" in os_disk:',
        "replacement": 'if mode == "Flexible" and "deleteOption" in os_disk:',
    },
    {
        "file": "infra/rules/gcp.py",
        "bug": "a GPU VM that live-migrates on host maintenance passes the rule",
        "original": 'if (gpus or scheduling.get("provisioningModel") == "SPOT") and',
        "replacement": 'if scheduling.get("provisioningModel") == "SPOT" and',
    },
]
