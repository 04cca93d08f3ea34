"""Render the node side of a fleet from `templates/` into cloud-init user-data.

One fleet's nodes boot with a `#cloud-config` document that writes these files and starts two systemd
units (see "On the node" in README.md for the full picture):

    /etc/trainfleet/trainfleet.env      what the scripts need: cloud, bucket, prefix, group, dirs, ...
    /etc/trainfleet/ds_config.json      DeepSpeed config derived from the stack's `deepspeed:` section
    /opt/trainfleet/trainfleet_agent.pyz the on-node agent (one zipapp) (restore, watch, peers, scale-to-zero)
    /opt/trainfleet/trainfleet-boot.sh  venv -> restore -> peers -> ds_config -> launch; relaunch on membership change
    /opt/trainfleet/venv                built at boot: the pinned PyTorch and DeepSpeed (infra/node_env.py)
    /opt/trainfleet/trainfleet-launch.sh  `deepspeed --hostfile H --no_ssh --node_rank R --master_addr A ...`
    /opt/trainfleet/train.py            the trainer (only when launch.script is the default), with the modules
                                        beside it: trainfleet_model.py (the LLM) and trainfleet_tokens.py (data)
    /etc/trainfleet/model.json          the model's shape, from the stack's job.model (or job.params)
    /opt/trainfleet/trainfleet-resize.py  before each launch: universal-checkpoint conversion to another node
                                        count (elastic recovery) and the launch's ds_config (same global batch)
    trainfleet-agent.service / trainfleet-trainer.service

Values are safe by construction. The schema (infra/config.py, and `check_stack_name` for the stack name)
keeps every value that reaches a node to what its place allows; on top of that every value interpolated in
a node template goes through ONE filter, `shq` (POSIX single quotes, see `shq`), and the #cloud-config
document is built as data and written by a YAML dumper (`cloud_config`), never by pasting values into YAML.

`render_user_data(...)` keeps every part readable (`.parts`), the whole cloud-config (`.document`) and
gives each provider input exactly what it wants (`.encoded(cloud)`): base64 for an AWS launch template
(gzip first when the raw document exceeds 16 KB) and Azure custom data, plain text for GCP metadata.
Nothing secret goes in: nodes reach the bucket and the group API through their instance identity.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import yaml

from infra.agent_artifact import ZIPAPP_NAME, zipapp_base64
from infra.config import LAUNCH_ARG_FORBIDDEN, Fleet, StackConfig
from infra.deepspeed_settings import zero_communication
from infra.elastic import usable_node_counts
from infra.errors import TrainfleetError, shown
from infra.model_shapes import job_shape, trainer_model_config
from infra.naming import check_stack_name
from infra.node_env import AGENT_REQUIREMENTS, AGENT_VENV, VENV, checkpoint_env, node_image
from infra.parallelism import data_parallel, layout_error, sequence_parallel, sequence_split_error

# Provider limits on the value each input accepts.
AWS_USER_DATA_LIMIT = 16 * 1024  # launch template user_data: 16 KB before base64
GCP_METADATA_LIMIT = 256 * 1024  # one metadata value
AZURE_CUSTOM_DATA_LIMIT = 64 * 1024  # custom_data: 64 KB, base64 encoded

GAUDI_ACCELERATORS = frozenset({"Gaudi-HL205"})

# Where things live on a node. The scripts read them from trainfleet.env, so tests can point them elsewhere.
NODE_HOME = "/opt/trainfleet"
AGENT_PART = ZIPAPP_NAME
NODE_ETC = "/etc/trainfleet"
NODE_STATE = "/var/lib/trainfleet"
ENV_FILE = f"{NODE_ETC}/trainfleet.env"

EXAMPLE_SCRIPT = "train.py"
# The trainer and the modules it imports from its own folder: the model and the token data reader.
TRAINER_FILES = (EXAMPLE_SCRIPT, "trainfleet_model.py", "trainfleet_tokens.py")

TEMPLATES_PACKAGE = "templates"


@dataclass(frozen=True)
class NodeFile:
    """One file cloud-init writes: where, with which mode, from which part."""

    part: str
    path: str
    permissions: str


@dataclass
class RenderedUserData:
    """A fleet's user-data: every part readable, the whole document, and per-provider encodings.

    `assets`: bucket key -> text of the node files too big for user-data (the agent and the example trainer;
    on every cloud, see FETCHED_PARTS). The fleet's bucket must hold them before a node boots (the Pulumi
    component uploads them as objects); the node fetches them with its instance identity and checks the
    sha256 that the user-data pins, so a changed file means a changed launch template / instance template /
    scale set model.
    """

    stack: str
    fleet: str
    cloud: str
    parts: dict[str, str]  # filename -> text, each as it lands on the node
    document: str  # the full #cloud-config document
    files: list[NodeFile] = field(default_factory=list)  # written by cloud-init from the document
    assets: dict[str, str] = field(default_factory=dict)  # bucket key -> text, fetched at boot

    @property
    def raw(self) -> bytes:
        return self.document.encode()

    def gzipped(self) -> bytes:
        # mtime=0: the same config renders the same bytes, so launch templates do not churn.
        return gzip.compress(self.raw, compresslevel=9, mtime=0)

    def payload(self, cloud: str | None = None) -> bytes:
        """The bytes the node receives (before any base64): gzip on AWS when the raw document is too big."""
        cloud = cloud or self.cloud
        if cloud == "aws" and len(self.raw) > AWS_USER_DATA_LIMIT:
            return self.gzipped()
        if cloud == "azure" and _b64_len(len(self.raw)) > AZURE_CUSTOM_DATA_LIMIT:
            return self.gzipped()  # cloud-init on Azure unpacks gzip custom data the same way
        return self.raw

    def encoded(self, cloud: str | None = None) -> str:
        """Exactly what the provider input takes: AWS user_data and Azure custom_data base64, GCP plain text."""
        cloud = cloud or self.cloud
        if cloud == "gcp":
            return self.document
        if cloud not in ("aws", "azure"):
            raise TrainfleetError(f"fleet {self.fleet!r}: unknown cloud {cloud!r}; use aws, gcp or azure")
        return base64.b64encode(self.payload(cloud)).decode("ascii")

    def sizes(self) -> dict[str, int]:
        return {
            "raw": len(self.raw),
            "gzip": len(self.gzipped()),
            "payload": len(self.payload()),
            "encoded": len(self.encoded()),
        }


def _b64_len(n: int) -> int:
    return 4 * ((n + 2) // 3)


def templates_root() -> Path:
    """The installed `templates` package (a sibling of `infra` in the source tree and in site-packages)."""
    try:
        module = importlib.import_module(TEMPLATES_PACKAGE)
    except ImportError:
        module = None
    here = getattr(module, "__file__", None)
    if here:
        return Path(here).parent
    return Path(__file__).resolve().parent.parent / TEMPLATES_PACKAGE


def shq(value: object) -> str:
    """The one way a value enters a node template: POSIX single quotes (shlex.quote).

    Read back identically by bash (`. trainfleet.env`, the scripts) and by systemd's EnvironmentFile parser
    (systemd.exec(5): a '-quoted value is taken verbatim, no backslash escapes; `"'"` gives a quote; adjacent
    quoted pieces join, as in src/basic/env-file.c). A plain value (letters, digits, `@%+=:,./-_`) stays
    unquoted, which both also read verbatim. A line break or other control character is refused: it would
    end a comment or a unit line, and the schema keeps them out of every value already."""
    text = str(value)
    if bad := LAUNCH_ARG_FORBIDDEN.search(text):
        raise TrainfleetError(
            f"{shown(text)} cannot go into a node file: it holds the control character {bad.group()!r}"
        )
    return shlex.quote(text)


def _tojson(value: object) -> str:
    """Values in the Python node file (trainfleet-fetch.py): JSON, which is a Python literal for the strings
    and lists of strings it gets. Strict like `shq`: an undefined variable fails the render."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError naming the variable
    return json.dumps(value, sort_keys=True)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_root())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shq"] = shq
    env.filters["tojson"] = _tojson
    return env


def accelerator_of(fleet: Fleet) -> tuple[str, int]:
    """(accelerator name, accelerators per node) from the catalog; ('', 0) if the catalog does not say."""
    from infra.catalog import default_catalog

    offers = default_catalog().offers(cloud=fleet.cloud, instance_type=fleet.instance_type)
    if not offers:
        return "", 0
    return offers[0].accelerator, offers[0].accelerators_per_node


def peak_tflops(accelerator: str, precision: str) -> float:
    """The accelerator's dense peak at the job's precision (the trainer's MFU); 0 when not known."""
    from infra.catalog import default_catalog

    chip = default_catalog().accelerator(accelerator)
    return (chip.peak(precision) if chip else None) or 0.0


def planned_tokens_per_s(config: StackConfig) -> float:
    """The job's tokens over its planned hours (the plan's throughput, which `trainfleet plan` writes); 0: none."""
    hours = config.job.planned_hours
    return config.job.tokens / (hours * 3600) if hours else 0.0


def is_gaudi(fleet: Fleet) -> bool:
    return accelerator_of(fleet)[0] in GAUDI_ACCELERATORS


def data_prefix(stack: str, config: StackConfig) -> str:
    """Where the job's token data lives in the bucket (index.json and shards: templates/trainfleet_tokens.py), under
    the job's prefix, which the node role may read; shared by the job's fleets."""
    from infra.naming import checkpoint_prefix as job_prefix

    return f"{job_prefix(stack, config).rstrip('/')}/data"


def checkpoint_prefix(stack: str, config: StackConfig, fleet: Fleet) -> str:
    """Where this fleet's checkpoints live in the bucket: `<prefix>/step-<N>/...` and `<prefix>/LATEST`.

    Under the job's prefix from infra/naming.py (the node role is scoped to it), one folder per fleet."""
    from infra.naming import checkpoint_prefix as job_prefix

    return f"{job_prefix(stack, config).rstrip('/')}/{fleet.name}"


# AdamW as large language models are commonly pretrained (Llama 2: betas 0.9/0.95, eps 1e-8, weight decay 0.1,
# peak lr 3e-4); a script's own --lr overrides the rate (templates/train.py).
OFFLOAD_ADAMW = {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}


def ds_config(config: StackConfig, fleet: Fleet) -> dict:
    """The DeepSpeed config every node of the fleet launches with, derived from the stack."""
    ds = config.deepspeed
    precision = config.job.precision
    _, per_node = accelerator_of(fleet)
    tp, pp = ds.tensor_parallel, ds.pipeline_parallel
    if per_node == 0 and tp > 1:
        raise TrainfleetError(
            f"trainfleet:deepspeed.tensor_parallel: the catalog does not say how many accelerators a "
            f"{fleet.instance_type} node of fleet {fleet.name!r} has, so tensor_parallel {tp} cannot be placed; "
            "use tensor_parallel 1 or an instance type the catalog lists"
        )
    problem = layout_error(tp, pp, per_node or 1, fleet.nodes) or sequence_split_error(tp, pp, config.job.seq_len)
    if problem:
        raise TrainfleetError(f"trainfleet:deepspeed: fleet {fleet.name!r}: {problem}")
    out: dict = {
        # The global batch the plan is for, fixed: DeepSpeed refuses to start when micro batch x accumulation x
        # data-parallel size differs from it (runtime/config.py `_batch_assertion`, world_size there is
        # `mpu.get_data_parallel_world_size()` when the script gives DeepSpeed its groups, as a PipelineModule
        # always does), so a job on another number of devices fails at launch instead of training with a batch
        # the learning-rate schedule was not set for. Data-parallel size: devices / (tp x pp).
        "train_batch_size": ds.micro_batch * ds.grad_accum * data_parallel((per_node or 1) * fleet.nodes, tp, pp),
        "train_micro_batch_size_per_gpu": ds.micro_batch,
        "gradient_accumulation_steps": ds.grad_accum,
        "gradient_clipping": 1.0,
        "steps_per_print": 100,
        "wall_clock_breakdown": False,
    }
    # fp8 runs its matmuls through Transformer Engine; DeepSpeed itself keeps bf16 master numerics.
    out["bf16"] = {"enabled": precision in ("bf16", "fp8")}
    fp16: dict[str, bool | int] = {"enabled": precision == "fp16"}
    if precision == "fp16":
        fp16.update({"loss_scale": 0, "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1})
    out["fp16"] = fp16
    zero: dict = {"stage": ds.zero_stage}
    # Bucket sizes and overlap: infra/deepspeed_settings.py, which the planner's memory model reads too.
    zero.update(zero_communication(ds.zero_stage))
    if ds.zero_stage == 3:
        zero.update({"stage3_gather_16bit_weights_on_model_save": False})
    nvme_path = f"{NODE_STATE}/nvme-offload"
    for key, device in (("offload_optimizer", ds.offload_optimizer), ("offload_param", ds.offload_param)):
        if device == "none":
            continue
        zero[key] = {"device": device, "pin_memory": device == "cpu"}
        if device == "nvme":
            zero[key]["nvme_path"] = nvme_path
    out["zero_optimization"] = zero
    if ds.offload_optimizer != "none":
        # ZeRO-Offload runs the optimizer step on the CPU with DeepSpeed's own CPU Adam, built from this block;
        # DeepSpeed refuses a client optimizer there (ZeRORuntimeException "You are using ZeRO-Offload with a
        # client provided optimizer"). A training script passes no optimizer when the config has one.
        out["optimizer"] = {"type": "AdamW", "params": dict(OFFLOAD_ADAMW)}
    if ds.offload_optimizer != "none" or ds.zero_stage >= 1:
        out["zero_allow_untested_optimizer"] = True
    if ds.activation_checkpointing:
        out["activation_checkpointing"] = {
            "partition_activations": ds.zero_stage == 3,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": ds.offload_param != "none",
            "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        }
    if tp > 1 and pp == 1:
        # AutoTP training: deepspeed.initialize shards the model's Linear layers over groups of tp ranks.
        out["tensor_parallel"] = {"autotp_size": tp}
    if pp > 1:
        # DeepSpeed parses `pipeline.stages` (runtime/config.py get_pipeline_config, default "auto") but the
        # engine takes the stage count from the PipelineModule the script builds: the script reads it here. Inside
        # a pipeline the script splits its own layers over tp ranks (AutoTP cannot: infra/parallelism.py); the
        # section keeps keys DeepSpeed does not know, so the degree travels beside the stages. Those layers also
        # split the sequence between blocks (infra/parallelism.py `sequence_parallel`): each tensor-parallel rank
        # then hands the next stage its own positions, which DeepSpeed must send whole, not split over the group
        # as it does when every rank holds the same tensor (runtime/pipe/engine.py `is_pipe_partitioned`).
        out["pipeline"] = {"stages": pp}
        if sequence_parallel(tp, pp):
            out["pipeline"].update(tensor_parallel=tp, sequence_parallel=True, pipe_partitioned=False,
                                   grad_partitioned=False)  # fmt: skip
    return out


def _node_context(stack: str, config: StackConfig, fleet: Fleet, bucket: str, group: str) -> dict:
    check_stack_name(stack)  # every node file and the cloud-config are rendered from this context
    accelerator, per_node = accelerator_of(fleet)
    gaudi = accelerator in GAUDI_ACCELERATORS
    script = config.launch.script  # a relative path of plain characters (Launch), under the node's home
    example = script == EXAMPLE_SCRIPT
    script_path = f"{NODE_HOME}/{script}"
    # The versions every node of the fleet trains with (infra/node_env.py): upstream DeepSpeed on NVIDIA images,
    # Habana's fork on Gaudi (same launcher CLI), each into the venv the boot script builds.
    image = node_image(fleet.cloud, gaudi)
    elastic = config.checkpoint.elastic
    return {
        "stack": stack,
        "job": config.job.name,
        "fleet": fleet,
        "cloud": fleet.cloud,
        "bucket": bucket,
        "group": group,
        "prefix": checkpoint_prefix(stack, config, fleet),
        "accelerator": accelerator or "unknown",
        "slots": per_node or 1,
        "gaudi": gaudi,
        "nodes": fleet.nodes,
        "interval_minutes": f"{config.checkpoint.interval_minutes:g}",
        "keep_last": config.checkpoint.keep_last,
        # the trainer's stop grace and the disk a launch needs, from the checkpoint each node writes (issue 29 #3, #6)
        **checkpoint_env(config, fleet),
        # elastic recovery (infra/elastic.py): 0 and 0 when the stack does not set checkpoint.elastic
        "elastic_min_nodes": elastic.min_nodes if elastic else 0,
        "elastic_wait_seconds": round(elastic.wait_for_replacement_s) if elastic else 0,
        # the sizes it may shrink to, each keeping the global batch a whole accumulation: the node picks from these
        "elastic_sizes": " ".join(
            str(n) for n in usable_node_counts(fleet.nodes, config.deepspeed.grad_accum, elastic.min_nodes)
        )
        if elastic
        else "",
        "master_port": config.launch.master_port,
        # what the trainer trains on and reports against (templates/train.py): the model, sequence, token data,
        # the device's peak for MFU and the plan's tokens/s
        "model_config_path": f"{NODE_ETC}/model.json",
        "seq_len": config.job.seq_len,
        "data_prefix": data_prefix(stack, config),
        "peak_tflops": f"{peak_tflops(accelerator, config.job.precision):g}",
        "planned_tokens_per_s": f"{planned_tokens_per_s(config):.1f}",
        "script_path": script_path,
        "script_args": config.launch.args,
        "example": example,
        "venv": VENV,
        "agent_venv": AGENT_VENV,
        # the agent's SDK pins, one word each (checked by the schema's characters: plain `name==version`)
        "agent_requirements": " ".join(AGENT_REQUIREMENTS[fleet.cloud]),
        "image_pythons": " ".join(image.pythons),
        "torch_version": image.torch_version,
        "torch_spec": image.torch_spec,
        "deepspeed_version": image.deepspeed_version,
        "deepspeed_spec": image.deepspeed_spec,
        "home": NODE_HOME,
        "etc": NODE_ETC,
        "state": NODE_STATE,
        "env_file": ENV_FILE,
        # Every cloud: the agent and example trainer come from the bucket (trainfleet-fetch.py, sha256-pinned).
        "fetch": True,
    }


def render_parts(stack: str, config: StackConfig, fleet: Fleet, *, bucket: str, group: str) -> dict[str, str]:
    """Every file a node gets, rendered and readable, keyed by file name."""
    env = _environment()
    deepspeed = ds_config(config, fleet)  # first: it refuses a layout the fleet cannot hold, in the schema's words
    ctx = _node_context(stack, config, fleet, bucket, group)
    parts = {
        "trainfleet.env": env.get_template("node/trainfleet.env.j2").render(ctx),
        "ds_config.json": json.dumps(deepspeed, indent=2) + "\n",
        "trainfleet-boot.sh": env.get_template("node/trainfleet-boot.sh.j2").render(ctx),
        "trainfleet-launch.sh": env.get_template("node/trainfleet-launch.sh.j2").render(ctx),
        "trainfleet-agent.service": env.get_template("node/trainfleet-agent.service.j2").render(ctx),
        "trainfleet-trainer.service": env.get_template("node/trainfleet-trainer.service.j2").render(ctx),
        # the model the trainer builds (templates/trainfleet_model.py), the shape the plan priced
        "model.json": json.dumps(trainer_model_config(job_shape(config.job.model, config.job.params)), indent=2)
        + "\n",
        # the agent, one pinned zipapp (infra/agent_artifact.py), as base64 text: cloud-init decodes it
        AGENT_PART: zipapp_base64(),
        # run before every launch with the training venv: converts a checkpoint saved by another node count
        "trainfleet-resize.py": (templates_root() / "node" / "trainfleet-resize.py").read_text(),
    }
    if ctx["example"]:
        for name in TRAINER_FILES:
            parts[name] = (templates_root() / name).read_text()
    return parts


def node_files(parts: dict[str, str]) -> list[NodeFile]:
    where = {
        "trainfleet.env": (ENV_FILE, "0644"),
        "ds_config.json": (f"{NODE_ETC}/ds_config.json", "0644"),
        "trainfleet-boot.sh": (f"{NODE_HOME}/trainfleet-boot.sh", "0755"),
        "trainfleet-launch.sh": (f"{NODE_HOME}/trainfleet-launch.sh", "0755"),
        "trainfleet-resize.py": (f"{NODE_HOME}/trainfleet-resize.py", "0644"),
        AGENT_PART: (f"{NODE_HOME}/{ZIPAPP_NAME}", "0755"),
        **{name: (f"{NODE_HOME}/{name}", "0644") for name in TRAINER_FILES},
        "model.json": (f"{NODE_ETC}/model.json", "0644"),
        "trainfleet-agent.service": ("/etc/systemd/system/trainfleet-agent.service", "0644"),
        "trainfleet-trainer.service": ("/etc/systemd/system/trainfleet-trainer.service", "0644"),
    }
    return [NodeFile(name, *where[name]) for name in parts]


def _check_literal_block(name: str, text: str) -> None:
    # A YAML literal block keeps every character except a leading-space first line and tabs in indent;
    # the parse-back check in render_user_data catches anything else.
    if not text.endswith("\n"):
        raise TrainfleetError(f"template part {name} must end with a newline")


# Parts fetched from the bucket at boot rather than embedded, on every cloud: they alone exceed AWS's 16 KB
# gzipped, Azure's 64 KB of base64(gzip) custom data, and grow with the agent (GCP's 256 KB would follow). The boot
# script too: it grows with every node-side feature (elastic recovery) and, like the agent, is needed only once
# runcmd's fetch has run, before the units start.
FETCHED_PARTS = (AGENT_PART, *TRAINER_FILES, "trainfleet-boot.sh", "trainfleet-resize.py")
# Parts that are base64 text of a binary file: cloud-init would write them decoded (`encoding: b64`), and so
# does trainfleet-fetch.py, after checking both the text's and the decoded file's sha256.
BASE64_PARTS = (AGENT_PART,)


def assets_prefix(stack: str, config: StackConfig, fleet: Fleet) -> str:
    return f"{checkpoint_prefix(stack, config, fleet)}/_node"


def asset_key(prefix: str, name: str, text: str) -> str:
    """Content-addressed, so nodes booting from an older launch template still find their files."""
    return f"{prefix}/{hashlib.sha256(text.encode()).hexdigest()[:16]}/{name}"


def render_user_data(
    stack: str, config: StackConfig, fleet: Fleet, *, bucket: str, group: str, assets_bucket: str | None = None
) -> RenderedUserData:
    """Render `fleet`'s cloud-init user-data; raises TrainfleetError naming the fleet if it cannot fit.

    `assets_bucket`: where the node files are fetched from when not the checkpoint bucket (Azure: a storage
    account of its own, see infra/azure/node_files.py); None: `bucket`."""
    parts = render_parts(stack, config, fleet, bucket=bucket, group=group)
    for name, text in parts.items():
        _check_literal_block(name, text)
    all_files = node_files(parts)
    ctx = _node_context(stack, config, fleet, bucket, group)
    embedded, fetched, assets = all_files, [], {}
    if ctx["fetch"]:
        prefix = assets_prefix(stack, config, fleet)
        fetched = [f for f in all_files if f.part in FETCHED_PARTS]
        embedded = [f for f in all_files if f.part not in FETCHED_PARTS]
        pins = []
        for f in fetched:
            key = asset_key(prefix, f.part, parts[f.part])
            assets[key] = parts[f.part]
            sha = hashlib.sha256(parts[f.part].encode()).hexdigest()
            pin = {"path": f.path, "key": key, "sha256": sha, "mode": f.permissions}
            if f.part in BASE64_PARTS:
                pin["decoded_sha256"] = hashlib.sha256(base64.b64decode(parts[f.part])).hexdigest()
            pins.append(pin)
        fetch = (
            _environment()
            .get_template("node/trainfleet-fetch.py.j2")
            .render(**ctx, assets=pins, assets_prefix=prefix, assets_bucket=assets_bucket or bucket)
        )
        parts["trainfleet-fetch.py"] = fetch
        embedded.append(NodeFile("trainfleet-fetch.py", f"{NODE_HOME}/trainfleet-fetch.py", "0755"))
    document = cloud_config(ctx, [(f, parts[f.part]) for f in embedded])
    _check_document(document, parts, embedded, fleet)
    rendered = RenderedUserData(stack, fleet.name, fleet.cloud, parts, document, embedded + fetched, assets)
    check_limits(rendered)
    return rendered


# ---------------------------------------------------------------- the #cloud-config document
# Built as data and written by a YAML dumper: no value is ever pasted into YAML text. Only the leading
# comment lines are text, and every value in them is checked to be one line (`_one_line`).

# Per cloud: what the provider input is, where spot notices and peers come from.
_CLOUD_NOTES = {
    "aws": [
        "AWS: launch template user_data (base64; gzip when over 16 KB). Spot notices come from IMDSv2",
        "(spot/instance-action and events/recommendations/rebalance); peers from the auto scaling group.",
        "runcmd: NVMe instance store (p4d/p5/dl1) is the fast place for checkpoints when the DLAMI mounted it.",
    ],
    "gcp": [
        "GCP: the `user-data` metadata value (plain text; needs an image that runs cloud-init, e.g. Ubuntu).",
        "Notices: metadata instance/preempted and instance/maintenance-event; peers: the managed instance group.",
    ],
    "azure": [
        "Azure: scale set custom_data (base64, at most 64 KB; gzipped first when it would not fit). Notices:",
        "Scheduled Events (Preempt), which the agent acknowledges; peers: the scale set's instances.",
        "runcmd: the temporary resource disk (/mnt) is local and fast; checkpoints are synced to the bucket anyway.",
    ],
}
# Per cloud: (test that fast local disk is there, folder on it) for NODE_STATE to link to.
_LOCAL_DISK = {
    "aws": ("[ -d /opt/dlami/nvme ]", "/opt/dlami/nvme/trainfleet"),
    "azure": ("mountpoint -q /mnt", "/mnt/trainfleet"),
}
# The paths are sh's positional parameters ($1 state dir, $2 folder on the local disk), never in the text.
_LINK_LOCAL_DISK = 'if {test} && [ ! -e "$1" ]; then mkdir -p "$2" && ln -sfn "$2" "$1"; fi'


class _Command(list):
    """A command (argv list) in the cloud-config: written on one line, `[systemctl, daemon-reload]`."""


class _CloudConfigDumper(yaml.SafeDumper):
    """yaml.safe_dump's dumper, plus: multi-line strings (the files) as literal blocks, commands on one line.
    The emitter falls back to a quoted scalar whenever a literal block could not carry a string exactly."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_CloudConfigDumper.add_representer(str, _represent_str)
_CloudConfigDumper.add_representer(
    _Command, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
)


def _one_line(value: object) -> str:
    """A value for a YAML comment line: refused if it could end the comment."""
    text = str(value)
    if bad := LAUNCH_ARG_FORBIDDEN.search(text):
        raise TrainfleetError(
            f"{shown(text)} cannot go into the cloud-config comment: it holds the control character {bad.group()!r}"
        )
    return text


def cloud_config(ctx: dict, files: list[tuple[NodeFile, str]]) -> str:
    """The #cloud-config document: comment lines, then the data below through the YAML dumper."""
    fleet, cloud, state = ctx["fleet"], ctx["cloud"], ctx["state"]
    v = {k: _one_line(x) for k, x in {
        "stack": ctx["stack"], "fleet": fleet.name, "nodes": fleet.nodes, "type": fleet.instance_type,
        "accelerator": ctx["accelerator"], "cloud": cloud, "bucket": ctx["bucket"], "prefix": ctx["prefix"],
    }.items()}  # fmt: skip
    head = [
        f"trainfleet stack {v['stack']}, fleet {v['fleet']}: {v['nodes']} x {v['type']} ({v['accelerator']}) "
        f"on {v['cloud']}",
        "Written by `trainfleet render`; each file below is also in the review folder, readable on its own.",
        "Boot: restore the latest complete checkpoint -> discover peers -> DeepSpeed launch (no ssh);",
        f"the agent watches for spot notices and syncs checkpoints to {v['bucket']}/{v['prefix']}.",
        "No secrets here: the node uses its instance identity for the bucket and the group API.",
        *_CLOUD_NOTES[cloud],
    ]
    runcmd = []
    if ctx["fetch"]:  # the agent and example trainer: fetched from the bucket, sha256-pinned, before the units
        runcmd.append(_Command(["python3", f"{ctx['home']}/trainfleet-fetch.py"]))
    # The state folder, on the fast local disk where there is one, before the units start. Not in bootcmd:
    # cloud-init runs bootcmd at the start of its init stage, before disk_setup and mounts (cloud.cfg's
    # cloud_init_modules), so Azure's resource disk is not mounted at /mnt yet; runcmd's script runs in the
    # final stage (scripts_user), after every mount.
    if cloud in _LOCAL_DISK:
        test, folder = _LOCAL_DISK[cloud]
        script = _LINK_LOCAL_DISK.format(test=test)
        runcmd.append(_Command(["sh", "-c", script, "trainfleet-local-disk", state, folder]))
    runcmd.append(_Command(["mkdir", "-p", f"{state}/checkpoints", f"{state}/run"]))
    runcmd += [
        _Command(["systemctl", "daemon-reload"]),
        _Command(["systemctl", "enable", "--now", "trainfleet-agent.service"]),
        _Command(["systemctl", "enable", "--now", "trainfleet-trainer.service"]),
    ]
    data = {
        "write_files": [
            {"path": f.path, "owner": "root:root", "permissions": f.permissions, "content": text}
            | ({"encoding": "b64"} if f.part in BASE64_PARTS else {})
            for f, text in files
        ],
        "runcmd": runcmd,
    }
    body = yaml.dump(
        data, Dumper=_CloudConfigDumper, sort_keys=False, allow_unicode=True, width=1 << 16,
        default_flow_style=False,
    )  # fmt: skip
    return "#cloud-config\n" + "".join(f"# {line}\n" for line in head) + body


def _check_document(document: str, parts: dict[str, str], files: list[NodeFile], fleet: Fleet) -> None:
    """Every embedded file reads back byte for byte: the YAML carries the parts unchanged."""
    if not document.startswith("#cloud-config\n"):
        raise TrainfleetError(
            f"fleet {fleet.name!r}: the cloud-config template must start with #cloud-config"
        )
    data = yaml.safe_load(document)
    written = {entry["path"]: entry["content"] for entry in data.get("write_files", [])}
    for f in files:
        if written.get(f.path) != parts[f.part]:
            raise TrainfleetError(
                f"fleet {fleet.name!r}: part {f.part} does not survive the cloud-config unchanged"
            )


def check_limits(rendered: RenderedUserData) -> None:
    cloud, fleet = rendered.cloud, rendered.fleet
    if cloud == "aws":
        size, limit, what = len(rendered.payload()), AWS_USER_DATA_LIMIT, "AWS user data (after gzip)"
    elif cloud == "gcp":
        size, limit, what = len(rendered.raw), GCP_METADATA_LIMIT, "GCP user-data metadata value"
    else:
        size, limit, what = len(rendered.encoded()), AZURE_CUSTOM_DATA_LIMIT, "Azure custom data (base64)"
    if size > limit:
        raise TrainfleetError(
            f"fleet {fleet!r}: {what} is {size} bytes, over the {limit}-byte limit; "
            f"shorten launch.args or use your own launch.script baked into the image"
        )


def render_fleets(
    stack: str, config: StackConfig, *, names: dict[str, tuple[str, str]] | None = None
) -> dict[str, RenderedUserData]:
    """Every fleet of a stack; `names` maps fleet -> (bucket, group), else review placeholders."""
    check_stack_name(stack)  # it names review files and lands in every node file: one ConfigError line
    out = {}
    for fleet in config.fleets:
        bucket, group = (names or {}).get(fleet.name) or placeholder_names(stack, config, fleet)
        assets_bucket = None if names else placeholder_assets_bucket(fleet)
        out[fleet.name] = render_user_data(
            stack, config, fleet, bucket=bucket, group=group, assets_bucket=assets_bucket
        )
    return out


def placeholder_names(stack: str, config: StackConfig, fleet: Fleet) -> tuple[str, str]:
    """Names for review, in the form each cloud's agent takes them. The group name is deterministic
    (infra/naming.py); names that exist only after `pulumi up` (bucket, storage account, GCP project) show
    as obvious REPLACE-ME placeholders. The assets (fetched files) do not depend on either name."""
    from infra.naming import group_name

    group = group_name(stack, fleet)
    bucket = config.checkpoint.bucket_name or f"REPLACE-ME-bucket-of-{stack}"
    if fleet.cloud == "gcp":  # a regional managed instance group, as the program declares it
        group = f"projects/REPLACE-ME-project/regions/{fleet.region}/instanceGroupManagers/{group}"
    elif fleet.cloud == "azure":  # the agent takes `account/container` (infra/azure/storage.py)
        bucket = "REPLACE-ME-storage-account/checkpoints"
    return bucket, group


def placeholder_assets_bucket(fleet: Fleet) -> str | None:
    """Where a fleet's node files are fetched from when not its checkpoint bucket, for review: on Azure a storage
    account of their own (named by Pulumi, so a placeholder here) and its container; None elsewhere."""
    from infra.naming import AZURE_NODE_FILES_CONTAINER

    if fleet.cloud == "azure":
        return f"REPLACE-ME-node-files-account/{AZURE_NODE_FILES_CONTAINER}"
    return None
