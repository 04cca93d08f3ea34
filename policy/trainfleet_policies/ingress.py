"""No ingress from the internet, whole or in pieces.

For every resource that allows inbound traffic by source address, the union of its source ranges
(`ipaddress.collapse_addresses`) may cover at most as many addresses as infra/config.py lets `ssh_cidrs`
open (SSH_WIDEST_PREFIX: one /8 of IPv4, one /32 of IPv6). So 0.0.0.0/0 and ::/0 fail, and so do
0.0.0.0/1 + 128.0.0.0/1, or 256 /8s. The stack policy applies the same limit to the union over every such
resource in the stack, so the internet split across many rules fails too.

Sources read (provider input names, camelCase):
  aws:vpc/securityGroupIngressRule      cidrIpv4, cidrIpv6
  aws:ec2/securityGroup (and default)   ingress[].cidrBlocks, ingress[].ipv6CidrBlocks
  aws:ec2/securityGroupRule             type "ingress": cidrBlocks, ipv6CidrBlocks
  gcp:compute/firewall                  direction INGRESS (the default), with `allows`, not disabled:
                                        sourceRanges; none of sourceRanges/sourceTags/sourceServiceAccounts
                                        means 0.0.0.0/0
  azure-native NetworkSecurityGroup     securityRules[] and SecurityRule resources with direction Inbound,
                                        access Allow: sourceAddressPrefix(es); "*", "Any", "Internet" mean
                                        the whole internet
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from infra.config import SSH_WIDEST_PREFIX

from .base import resource_policy
from .props import dig, is_unknown, listed, plain

NAME = "no-internet-ingress"
STACK_NAME = "no-internet-ingress-stack"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
EVERYWHERE: tuple[Network, ...] = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
# Azure NSG source words that mean any address (https://learn.microsoft.com/azure/virtual-network/network-security-groups-overview#security-rules
# and https://learn.microsoft.com/azure/virtual-network/service-tags-overview: "Internet").
AZURE_ANYWHERE = {"*", "any", "internet"}

AWS_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AWS_SECURITY_GROUPS = (
    "aws:ec2/securityGroup:SecurityGroup",
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
)
AWS_SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
AZURE_NSG = "azure-native:network:NetworkSecurityGroup"
AZURE_RULE = "azure-native:network:SecurityRule"


def _networks(values: Iterable[Any]) -> list[Network]:
    out = []
    for value in values:
        if not isinstance(value, str) or is_unknown(value):
            continue
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            continue  # not a CIDR (a service tag, a name): the provider resolves it, not an address range
    return out


def _azure_sources(rule: Any) -> list[Network]:
    if (
        str(dig(rule, "direction", "")).lower() != "inbound"
        or str(dig(rule, "access", "")).lower() != "allow"
    ):
        return []
    prefixes = listed(dig(rule, "sourceAddressPrefix")) + listed(dig(rule, "sourceAddressPrefixes"))
    if any(isinstance(p, str) and p.strip().lower() in AZURE_ANYWHERE for p in prefixes):
        return list(EVERYWHERE)
    return _networks(prefixes)


def _aws_rule_sources(rule: Any) -> list[Network]:
    return _networks(listed(dig(rule, "cidrBlocks")) + listed(dig(rule, "ipv6CidrBlocks")))


def ingress_sources(resource_type: str, props: Any) -> list[Network]:
    """The source address ranges the resource lets in (allow rules only)."""
    if resource_type == AWS_INGRESS_RULE:
        return _networks([dig(props, "cidrIpv4"), dig(props, "cidrIpv6")])
    if resource_type in AWS_SECURITY_GROUPS:
        return [n for rule in listed(dig(props, "ingress")) for n in _aws_rule_sources(rule)]
    if resource_type == AWS_SG_RULE:
        return _aws_rule_sources(props) if dig(props, "type") == "ingress" else []
    if resource_type == GCP_FIREWALL:
        direction = dig(props, "direction", "INGRESS")
        if direction != "INGRESS" or dig(props, "disabled") is True or not listed(dig(props, "allows")):
            return []
        ranges = listed(dig(props, "sourceRanges"))
        if (
            not ranges
            and not listed(dig(props, "sourceTags"))
            and not listed(dig(props, "sourceServiceAccounts"))
        ):
            # https://cloud.google.com/firewall/docs/firewalls#sources_for_rules: an ingress rule with no
            # source applies to 0.0.0.0/0.
            return [EVERYWHERE[0]]
        return _networks(ranges)
    if resource_type == AZURE_NSG:
        return [n for rule in listed(dig(props, "securityRules")) for n in _azure_sources(rule)]
    if resource_type == AZURE_RULE:
        return _azure_sources(props)
    return []


def too_wide(networks: Iterable[Network]) -> list[str]:
    """Per IP version, why the union of `networks` is wider than SSH_WIDEST_PREFIX allows."""
    nets = list(networks)
    out = []
    for version, widest in SSH_WIDEST_PREFIX.items():
        mine = [n for n in nets if n.version == version]
        if not mine:
            continue
        union = list(ipaddress.collapse_addresses(mine))  # type: ignore[type-var]
        covered = sum(n.num_addresses for n in union)
        limit = 2 ** ((32 if version == 4 else 128) - widest)
        if covered > limit:
            shown = ", ".join(str(n) for n in union[:4]) + (" ..." if len(union) > 4 else "")
            whole = " (the whole internet)" if covered == 2 ** (32 if version == 4 else 128) else ""
            out.append(
                f"IPv{version} ingress from {shown} covers {covered:.3g} addresses{whole}, more than one "
                f"/{widest}; allow only your own networks"
            )
    return out


def ingress_findings(resource_type: str, props: Any) -> list[str]:
    return too_wide(ingress_sources(resource_type, props))


POLICY = resource_policy(
    NAME,
    "No ingress from 0.0.0.0/0, ::/0, or source ranges whose union is wider than one /8 (IPv4) or /32 (IPv6), "
    "the limit infra/config.py puts on ssh_cidrs. Follows https://docs.aws.amazon.com/vpc/latest/userguide/security-group-rules.html, "
    "https://cloud.google.com/firewall/docs/firewalls#sources_for_rules and "
    "https://learn.microsoft.com/azure/virtual-network/network-security-groups-overview#security-rules.",
    ingress_findings,
)


def stack_ingress_findings(resources: list[PolicyResource]) -> list[str]:
    nets = [n for r in resources for n in ingress_sources(r.resource_type, plain(r.props))]
    return [f"across the stack: {message}" for message in too_wide(nets)]


def validate_stack_ingress(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    for message in stack_ingress_findings(list(args.resources)):
        report_violation(message, None)


STACK_POLICY = StackValidationPolicy(
    name=STACK_NAME,
    description=(
        "The union of every ingress source range in the stack (security groups and their rules, firewalls, "
        "NSG rules) covers at most one /8 (IPv4) or /32 (IPv6), as infra/config.py's ssh_cidrs. Follows "
        "https://docs.aws.amazon.com/vpc/latest/userguide/security-group-rules.html, "
        "https://cloud.google.com/firewall/docs/firewalls#sources_for_rules and "
        "https://learn.microsoft.com/azure/virtual-network/network-security-groups-overview#security-rules."
    ),
    validate=validate_stack_ingress,
    enforcement_level=EnforcementLevel.MANDATORY,
)
