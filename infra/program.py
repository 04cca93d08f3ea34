"""The Pulumi program, as a function: `declare(stack, config)` builds every component and returns the exports.

`infra/__main__.py` calls it under the real engine (`pulumi up`); `infra.mock_runtime.run_program`
calls it under Pulumi's mock runtime (`trainfleet stacks check`, the tests, the offline preview). It
reads nothing but its arguments and the embedded catalog: no Pulumi config, no environment, no CLI.

Per fleet: network, checkpoint bucket, node identity, and the group itself (ASG / MIG / VMSS).
Per cloud used by the stack: one budget (when the config has one) and one billing export (when on).
Cloud SDKs are imported only for the clouds a stack uses (pulumi-azure-native is slow to import).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import pulumi

from infra import naming, userdata
from infra.catalog import default_catalog
from infra.checkpoint_io import azure_terminate_minutes
from infra.config import TAG_STACK, Fleet, StackConfig
from infra.errors import ConfigError
from infra.placement import shares_cluster_placement_group

if TYPE_CHECKING:
    from infra.gcp.services import ProjectServices

GCP_BILLING_EXPORT_NOTE = (
    "Cloud Billing export to BigQuery cannot be switched on by API: in the console open Billing > "
    "Billing export > BigQuery export and choose dataset {dataset} in project {project} "
    "(detailed usage cost)"
)


# ---------------------------------------------------------------- catalog facts the program needs


def fleet_zones(fleet: Fleet) -> list[str]:
    """The configured zones, else where the catalog has the instance type in the region.

    An AWS fleet of several nodes shares a cluster placement group, which lives in one zone: with no zones
    configured it gets the zone with the cheapest spot price (on-demand: the first), never a list."""
    if fleet.zones:
        return list(fleet.zones)
    offers = [
        o
        for o in default_catalog().offers(cloud=fleet.cloud, region=fleet.region, instance_type=fleet.instance_type)
        if o.zone
    ]
    zones = sorted({o.zone for o in offers})
    if shares_cluster_placement_group(fleet.cloud, fleet.nodes) and zones:
        priced = sorted((o.spot_usd_per_hour, o.zone) for o in offers if o.spot_usd_per_hour is not None)
        return [priced[0][1] if priced and fleet.purchase != "on-demand" else zones[0]]
    return zones


def fleet_types(fleet: Fleet) -> list[str]:
    return [fleet.instance_type, *fleet.fallback_instance_types]


def offers_efa(fleet: Fleet) -> bool:
    """EFA only where every type the group may launch has it, and only when nodes talk to each other."""
    catalog = default_catalog()
    if fleet.cloud != "aws" or fleet.nodes < 2:
        return False
    for instance_type in fleet_types(fleet):
        offers = catalog.offers(cloud="aws", region=fleet.region, instance_type=instance_type)
        if not offers or any(o.fabric != "efa" for o in offers):
            return False
    return True


def is_gaudi(fleet: Fleet) -> bool:
    offers = default_catalog().offers(cloud=fleet.cloud, instance_type=fleet.instance_type)
    return any(o.accelerator.lower().startswith("gaudi") for o in offers)


def fleet_price(fleet: Fleet) -> dict[str, Any]:
    """The fleet's hourly price at catalog prices: on-demand nodes at on-demand, spot nodes at the
    cheapest spot price among its zones. None where the catalog has no price (never a silent 0)."""
    offers = default_catalog().offers(
        cloud=fleet.cloud, region=fleet.region, instance_type=fleet.instance_type
    )
    zones = set(fleet_zones(fleet))
    zonal = [o for o in offers if not o.zone or not zones or o.zone in zones]
    on_demand = next((o.on_demand_usd_per_hour for o in zonal if o.on_demand_usd_per_hour is not None), None)
    spot_offers = sorted(
        (o for o in zonal if o.spot_usd_per_hour is not None), key=lambda o: o.spot_usd_per_hour or 0.0
    )
    spot = spot_offers[0].spot_usd_per_hour if spot_offers else None
    parts: list[float | None] = []
    if fleet.on_demand_nodes:
        parts.append(None if on_demand is None else on_demand * fleet.on_demand_nodes)
    if fleet.spot_nodes:
        parts.append(None if spot is None else spot * fleet.spot_nodes)
    total = None if any(p is None for p in parts) else round(sum(p or 0.0 for p in parts), 4)
    source = spot_offers[0] if spot_offers else (zonal[0] if zonal else None)
    return {
        "usd_per_hour": total,
        "nodes": fleet.nodes,
        "spot_nodes": fleet.spot_nodes,
        "on_demand_nodes": fleet.on_demand_nodes,
        "on_demand_usd_per_node_hour": on_demand,
        "spot_usd_per_node_hour": spot,
        "spot_zone": spot_offers[0].zone if spot_offers else None,
        "source": source.source if source else None,
        "as_of": (source.as_of or None) if source else None,
    }


# ---------------------------------------------------------------- user-data


def node_assets(stack: str, config: StackConfig, fleet: Fleet) -> dict[str, str]:
    """Node files fetched from the bucket at boot, on every cloud (they do not fit in AWS's 16 KB of user-data
    nor Azure's 64 KB of custom data; GCP gets them the same way).

    Their keys are content-addressed and their text does not depend on the bucket's name, so they are
    known before the bucket exists and can be uploaded as ordinary resources."""
    bucket, group = userdata.placeholder_names(stack, config, fleet)
    return dict(userdata.render_user_data(stack, config, fleet, bucket=bucket, group=group).assets)


def user_data(
    stack: str,
    config: StackConfig,
    fleet: Fleet,
    *,
    bucket: pulumi.Input[str],
    group: pulumi.Input[str],
    assets: dict[str, str] | None = None,
    assets_bucket: pulumi.Input[str] | None = None,
) -> pulumi.Output[str]:
    """The fleet's cloud-init, encoded as its cloud's provider input wants it (rendered once names are known).
    `assets_bucket`: where the node fetches `assets` from, when not the checkpoint bucket (Azure)."""

    def render(values: list[str]) -> str:
        rendered = userdata.render_user_data(
            stack, config, fleet, bucket=values[0], group=values[1], assets_bucket=values[2]
        )
        if assets is not None and rendered.assets != assets:
            raise ConfigError(
                f"fleet {fleet.name!r}: node files depend on the bucket name; cannot upload them first"
            )
        return rendered.encoded(fleet.cloud)

    fetch_from = assets_bucket if assets_bucket is not None else bucket
    return pulumi.Output.all(bucket, group, fetch_from).apply(render)


# ---------------------------------------------------------------- starting a run


def start_run_command(fleet: Fleet, group: str, resource_group: str | None = None) -> str:
    """The command that starts a run: every group is created empty, and the last run scales it back to zero.
    `pulumi up` never does: the size is this command's and the node agent's (never in an update request), so no
    `up` relaunches a finished job or resizes a running one, and a change of `nodes` takes effect at the next
    start (the AWS max size follows at once)."""
    q, n = shlex.quote, str(fleet.nodes)
    if fleet.cloud == "aws":
        return (
            f"aws autoscaling set-desired-capacity --region {q(fleet.region)} "
            f"--auto-scaling-group-name {q(group)} --desired-capacity {n}"
        )
    if fleet.cloud == "gcp":
        return f"gcloud compute instance-groups managed resize {q(group)} --region {q(fleet.region)} --size {n}"
    return f"az vmss scale --resource-group {q(resource_group or '')} --name {q(group)} --new-capacity {n}"


# ---------------------------------------------------------------- per cloud


def _check_bucket_name(config: StackConfig) -> str | None:
    name = config.checkpoint.bucket_name
    if name is not None and len(config.fleets) > 1:
        raise ConfigError(
            f"trainfleet:checkpoint.bucket_name names one bucket, but the stack has {len(config.fleets)} "
            "fleets and each gets its own bucket; remove bucket_name to let each be named"
        )
    return name


def _aws_fleet(stack: str, config: StackConfig, fleet: Fleet) -> dict[str, Any]:
    from infra.aws.bucket import CheckpointBucket, CheckpointBucketArgs
    from infra.aws.fleet import SpotFleet, SpotFleetArgs
    from infra.aws.gaudi import GaudiGroup, GaudiGroupArgs
    from infra.aws.iam import NodeRole, NodeRoleArgs
    from infra.aws.network import Network, NetworkArgs

    tags = config.resource_tags(stack, fleet)
    group = naming.group_name(stack, fleet)
    prefix = naming.checkpoint_prefix(stack, config)
    zones = fleet_zones(fleet)
    net = fleet.network
    network = Network(
        f"{fleet.name}-net",
        NetworkArgs(
            region=fleet.region,
            zones=zones,
            tags=tags,
            vpc_id=net.name if net else None,
            subnet_ids=list(net.subnets) if net else [],
        ),
    )
    bucket = CheckpointBucket(
        f"{fleet.name}-ckpt",
        CheckpointBucketArgs(
            region=fleet.region,
            retention_days=config.checkpoint.retention_days,
            tags=tags,
            bucket_name=_check_bucket_name(config),
        ),
    )
    role = NodeRole(
        f"{fleet.name}-node",
        NodeRoleArgs(region=fleet.region, bucket_arn=bucket.arn, prefix=prefix, group_name=group, tags=tags),
    )
    gaudi = is_gaudi(fleet)
    assets = node_assets(stack, config, fleet)
    fleet_args: dict[str, Any] = dict(
        region=fleet.region,
        group_name=group,
        vpc_id=network.vpc_id,
        subnet_ids=network.subnet_ids,
        instance_type=fleet.instance_type,
        fallback_instance_types=list(fleet.fallback_instance_types),
        nodes=fleet.nodes,
        on_demand_base=fleet.on_demand_nodes if fleet.purchase == "on-demand" else fleet.on_demand_base,
        on_demand_percentage_above_base=100
        if fleet.purchase == "on-demand"
        else fleet.on_demand_percentage_above_base,
        max_price=fleet.max_price,
        image_id=fleet.image,
        root_volume_gb=fleet.root_volume_gb,
        ssh_cidrs=list(fleet.ssh_cidrs),
        efa=offers_efa(fleet),
        instance_profile_arn=role.instance_profile_arn,
        user_data=user_data(stack, config, fleet, bucket=bucket.bucket_name, group=group, assets=assets),
        node_assets=assets,
        assets_bucket=bucket.bucket_name,
        tags=tags,
    )
    if gaudi:
        component = GaudiGroup(fleet.name, GaudiGroupArgs(**fleet_args))
    else:
        component = SpotFleet(fleet.name, SpotFleetArgs(**fleet_args))
    return {
        "group": component.group_name,
        "group_arn": component.group_arn,
        "image": component.image_id,
        "bucket": bucket.bucket_name,
        "checkpoint_url": bucket.url.apply(lambda u: f"{u}/{prefix}"),
        "role": role.role_arn,
        "vpc": network.vpc_id,
        "efa": fleet_args["efa"],
        "kind": "gaudi" if gaudi else "gpu",
        "start_run": start_run_command(fleet, group),
    }


def _budget_terms(config: StackConfig) -> dict[str, Any]:
    """What every cloud's Budget component takes from the stack's budget section."""
    assert config.budget is not None
    return {
        "limit_usd": config.budget.monthly_limit_usd,
        "thresholds_percent": list(config.budget.alert_thresholds_percent),
        "recipients": list(config.budget.recipients),
    }


def _aws_stack_wide(stack: str, config: StackConfig, exports: dict[str, Any]) -> None:
    aws_fleets = [f for f in config.fleets if f.cloud == "aws"]
    if config.budget is not None:
        from infra.aws.budget import Budget, BudgetArgs

        budget = Budget(
            "aws-budget",
            BudgetArgs(
                name=f"trainfleet-{naming.stack_slug(stack)}",
                stack=stack,
                **_budget_terms(config),
                activate_tag=config.budget.activate_cost_allocation_tag,
            ),
        )
        exports["budgets"]["aws"] = budget.budget_names
    if config.billing_export.enabled:
        from infra.aws.billing_export import BillingExport, BillingExportArgs

        export = BillingExport(
            "aws-billing",
            BillingExportArgs(
                export_name=naming.billing_export_name(stack),
                region=aws_fleets[0].region,
                tags=config.resource_tags(stack),
            ),
        )
        exports["billing_exports"]["aws"] = {
            "kind": "CUR 2.0 data export",
            "bucket": export.bucket_name,
            "export_arn": export.export_arn,
        }


def _gcp_fleet(stack: str, config: StackConfig, fleet: Fleet) -> dict[str, Any]:
    from infra.gcp.bucket import CheckpointBucket, CheckpointBucketArgs
    from infra.gcp.fleet import SpotFleet, SpotFleetArgs
    from infra.gcp.iam import NodeServiceAccount, NodeServiceAccountArgs
    from infra.gcp.network import Network, NetworkArgs

    if fleet.purchase == "mixed":
        raise ConfigError(
            f"fleet {fleet.name!r}: a GCP managed instance group cannot mix Spot and standard VMs; "
            "use purchase: spot or on-demand (or a second fleet)"
        )
    if fleet.max_price not in (None, -1):
        raise ConfigError(
            f"fleet {fleet.name!r}: GCP Spot VMs have no maximum price (they stop at preemption, not at a bid); "
            "remove max_price"
        )
    labels = naming.gcp_labels(config.resource_tags(stack, fleet))
    group = naming.group_name(stack, fleet)
    prefix = naming.checkpoint_prefix(stack, config)
    net = fleet.network
    network = Network(
        f"{fleet.name}-net",
        NetworkArgs(
            region=fleet.region,
            network=net.name if net else None,
            subnetwork=net.subnets[0] if net and net.subnets else None,
        ),
    )
    bucket = CheckpointBucket(
        f"{fleet.name}-ckpt",
        CheckpointBucketArgs(
            region=fleet.region,
            retention_days=config.checkpoint.retention_days,
            labels=labels,
            bucket_name=_check_bucket_name(config),
        ),
    )
    account = NodeServiceAccount(
        f"{fleet.name}-node",
        NodeServiceAccountArgs(
            account_id=naming.gcp_account_id(stack, fleet),
            role_id=naming.gcp_role_id(stack, fleet),
            region=fleet.region,
            group_name=group,
            bucket=bucket.bucket_name,
            prefix=prefix,
            limit_to_tagged_group=fleet.gcp_group_access == "group-tag",
        ),
    )
    # A regional group: the node agent takes its full path (a bare name means a zonal group).
    group_path = account.project.apply(
        lambda project: f"projects/{project}/regions/{fleet.region}/instanceGroupManagers/{group}"
    )
    assets = node_assets(stack, config, fleet)
    component = SpotFleet(
        fleet.name,
        SpotFleetArgs(
            region=fleet.region,
            zones=fleet_zones(fleet),
            group_name=group,
            network=network.network,
            subnetwork=network.subnetwork,
            machine_type=fleet.instance_type,
            nodes=fleet.nodes,
            service_account_email=account.email,
            user_data=user_data(
                stack, config, fleet, bucket=bucket.bucket_name, group=group_path, assets=assets
            ),
            node_assets=assets,
            assets_bucket=bucket.bucket_name,
            labels=labels,
            spot=fleet.purchase == "spot",
            termination_action=fleet.spot_termination_action,
            image=fleet.image,
            root_volume_gb=fleet.root_volume_gb,
            ssh_cidrs=list(fleet.ssh_cidrs),
            resource_manager_tags=account.group_tags,
        ),
    )
    return {
        "group": component.group_name,
        "group_path": group_path,
        "bucket": bucket.bucket_name,
        "checkpoint_url": bucket.url.apply(lambda u: f"{u}/{prefix}"),
        "service_account": account.email,
        "network": network.network,
        "kind": "gpu",
        "start_run": start_run_command(fleet, group),
    }


def _gcp_stack_wide(
    stack: str, config: StackConfig, exports: dict[str, Any], apis: ProjectServices | None = None
) -> None:
    labels = naming.gcp_labels(config.resource_tags(stack))
    if config.budget is not None:
        from infra.gcp.budget import Budget, BudgetArgs

        budget = Budget(
            "gcp-budget",
            BudgetArgs(
                display_name=f"trainfleet {stack}",
                stack_label=labels[TAG_STACK],
                **_budget_terms(config),
                labels=labels,
                after=list(apis.services) if apis is not None else [],
            ),
        )
        exports["budgets"]["gcp"] = budget.budget_name
    if config.billing_export.enabled:
        from infra.gcp.billing_export import BillingExport, BillingExportArgs

        export = BillingExport(
            "gcp-billing",
            BillingExportArgs(dataset_id=naming.billing_dataset_id(stack), location="US", labels=labels),
        )
        exports["billing_exports"]["gcp"] = {
            "kind": "BigQuery dataset for the Cloud Billing export",
            "dataset": export.dataset_id,
            "action_required": export.instructions,
        }


def _azure_fleet(stack: str, config: StackConfig, fleet: Fleet) -> dict[str, Any]:
    from infra.azure.fleet import SpotFleet, SpotFleetArgs
    from infra.azure.identity import NodeIdentity, NodeIdentityArgs
    from infra.azure.network import Network, NetworkArgs
    from infra.azure.node_files import NodeFiles, NodeFilesArgs
    from infra.azure.storage import CheckpointStorage, CheckpointStorageArgs

    if fleet.purchase == "mixed":
        raise ConfigError(
            f"fleet {fleet.name!r}: an Azure Uniform scale set cannot mix Spot and regular VMs; "
            "use purchase: spot or on-demand (or a second fleet)"
        )
    if config.checkpoint.bucket_name is not None:
        raise ConfigError(
            "trainfleet:checkpoint.bucket_name does not apply to Azure fleets (storage accounts are named "
            "by Pulumi); remove it"
        )
    net = fleet.network
    if net is not None and not net.subnets:
        raise ConfigError(
            f"fleet {fleet.name!r}: network.subnets must name the subnet id to use in VNet {net.name}"
        )
    tags = config.resource_tags(stack, fleet)
    group = naming.group_name(stack, fleet)
    prefix = naming.checkpoint_prefix(stack, config)
    network = Network(
        f"{fleet.name}-net",
        NetworkArgs(
            location=fleet.region,
            tags=tags,
            zones=list(fleet.zones),
            vnet_id=net.name if net else None,
            subnet_id=net.subnets[0] if net else None,
            ssh_cidrs=list(fleet.ssh_cidrs),
        ),
    )
    storage = CheckpointStorage(
        f"{fleet.name}-ckpt",
        CheckpointStorageArgs(
            resource_group_name=network.resource_group_name,
            location=fleet.region,
            retention_days=config.checkpoint.retention_days,
            tags=tags,
        ),
    )
    # The node files go to an account of their own: azure-native uploads blobs with the account key, which the
    # checkpoint account refuses (infra/azure/node_files.py).
    files = NodeFiles(
        f"{fleet.name}-files",
        NodeFilesArgs(resource_group_name=network.resource_group_name, location=fleet.region, tags=tags),
    )
    identity = NodeIdentity(
        f"{fleet.name}-node",
        NodeIdentityArgs(
            resource_group_name=network.resource_group_name,
            resource_group_id=network.resource_group_id,
            location=fleet.region,
            container_id=storage.container_id,
            prefix=prefix,
            group_name=group,
            role_seed=f"{naming.stack_slug(stack)}/{fleet.name}",
            tags=tags,
            files_container_id=files.container_id,
        ),
    )
    assets = node_assets(stack, config, fleet)
    component = SpotFleet(
        fleet.name,
        SpotFleetArgs(
            resource_group_name=network.resource_group_name,
            location=fleet.region,
            group_name=group,
            vm_size=fleet.instance_type,
            nodes=fleet.nodes,
            subnet_id=network.subnet_id,
            nsg_id=network.nsg_id,
            identity_id=identity.identity_id,
            principal_id=identity.principal_id,
            group_role_id=identity.group_role_id,
            custom_data=user_data(
                stack, config, fleet, bucket=storage.bucket, group=group, assets=assets,
                assets_bucket=files.bucket,
            ),  # fmt: skip
            node_assets=assets,
            assets_account_name=files.account_name,
            assets_container_name=files.container_name,
            tags=tags,
            zones=list(fleet.zones),
            spot=fleet.purchase == "spot",
            max_price=fleet.max_price,
            image=fleet.image,
            root_volume_gb=fleet.root_volume_gb,
            terminate_notice_minutes=terminate_notice_minutes(config, fleet),
        ),
    )
    return {
        "group": component.group_name,
        "group_id": component.group_id,
        "resource_group": network.resource_group_name,
        "bucket": storage.bucket,
        "checkpoint_url": storage.url.apply(lambda u: f"{u}/{prefix}"),
        "node_files": files.bucket,
        "identity_client_id": identity.client_id,
        "kind": "gpu",
        "start_run": network.resource_group_name.apply(lambda rg: start_run_command(fleet, group, rg)),
    }


def terminate_notice_minutes(config: StackConfig, fleet: Fleet) -> int:
    """The Azure terminate notification's window: what the job's emergency checkpoint takes on this fleet
    (infra/checkpoint_io.py), 5 to 15 minutes, for the largest part a node saves (node 0's under ZeRO-0/1/2: the
    whole 16-bit model; infra/disk_need.py `layout`). The NC/ND A100 sizes have no network figure in the catalog
    (issue 32): the storage account's ingress and the per-node rate bound the upload instead."""
    from infra.disk_need import layout  # not at import: disk_need reaches userdata, which this module imports

    part = max(layout(config, fleet).saved_bytes) if config.job.method == "full" else None  # LoRA: the adapters
    return azure_terminate_minutes(config.job.params, fleet.nodes, None, part_bytes=part)


def _azure_stack_wide(stack: str, config: StackConfig, exports: dict[str, Any]) -> None:
    azure_fleets = [f for f in config.fleets if f.cloud == "azure"]
    if config.budget is not None:
        from infra.azure.budget import Budget, BudgetArgs

        budget = Budget(
            "azure-budget",
            BudgetArgs(
                name=f"trainfleet-{naming.stack_slug(stack)}",
                stack=stack,
                **_budget_terms(config),
            ),
        )
        exports["budgets"]["azure"] = budget.budget_ids
    if config.billing_export.enabled:
        from infra.azure.billing_export import BillingExport, BillingExportArgs

        export = BillingExport(
            "azure-billing",
            BillingExportArgs(
                export_name=naming.billing_export_name(stack),
                location=azure_fleets[0].region,
                root_folder=f"trainfleet/{naming.stack_slug(stack)}",
                tags=config.resource_tags(stack),
            ),
        )
        exports["billing_exports"]["azure"] = {
            "kind": "Cost Management export (actual cost, daily)",
            "storage_account": export.account_name,
            "export_id": export.export_id,
        }


def _enable_gcp_apis(config: StackConfig) -> ProjectServices:
    """Enable the Google APIs the stack calls (a new project has most of them off) before any GCP resource."""
    from infra.gcp.services import ProjectServices, ProjectServicesArgs, apis_for

    apis = apis_for(budget=config.budget is not None, billing_export=config.billing_export.enabled)
    services = ProjectServices("gcp-services", ProjectServicesArgs(apis))
    pulumi.runtime.register_stack_transformation(services.wait_for_services)
    return services


_FLEET = {"aws": _aws_fleet, "gcp": _gcp_fleet, "azure": _azure_fleet}
_STACK_WIDE = {"aws": _aws_stack_wide, "azure": _azure_stack_wide}  # GCP's takes its APIs too (declare)


def declare(stack: str, config: StackConfig) -> dict[str, Any]:
    """Build every component for every fleet of `config`; return the stack outputs (Pulumi inputs)."""
    exports: dict[str, Any] = {
        "stack": stack,
        "job": config.job.name,
        "fleets": {},
        "budgets": {},
        "billing_exports": {},
    }
    gcp_apis = _enable_gcp_apis(config) if any(f.cloud == "gcp" for f in config.fleets) else None
    for fleet in config.fleets:
        outputs = _FLEET[fleet.cloud](stack, config, fleet)
        exports["fleets"][fleet.name] = {
            "cloud": fleet.cloud,
            "region": fleet.region,
            "zones": fleet_zones(fleet),
            "instance_types": fleet_types(fleet),
            "purchase": fleet.purchase,
            "checkpoint_prefix": naming.checkpoint_prefix(stack, config),
            "hourly_price": fleet_price(fleet),
            **outputs,
        }
    for cloud in sorted({f.cloud for f in config.fleets}):
        if cloud == "gcp":
            _gcp_stack_wide(stack, config, exports, gcp_apis)
        else:
            _STACK_WIDE[cloud](stack, config, exports)
    prices = [f["hourly_price"]["usd_per_hour"] for f in exports["fleets"].values()]
    exports["hourly_price_usd"] = None if any(p is None for p in prices) else round(sum(prices), 4)
    return exports
