"""The `trainfleet` command: a Typer app whose commands are thin shells over library functions.

Command modules register themselves on import (see COMMAND_MODULES). They import heavy libraries
(pulumi, boto3, the planner) inside the command body, so `trainfleet --help` stays instant.
All user errors surface here, at one boundary: one line on stderr, exit code 2, no traceback.
"""

from __future__ import annotations

import functools
import importlib
import sys

import typer
from typer.exceptions import Abort, Exit, TyperException

from cli.output import error_line
from infra.errors import TrainfleetError

app = typer.Typer(
    name="trainfleet",
    help="Plan, render, preview and price spot-capacity training fleets on AWS, GCP and Azure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Each module adds its commands to `app` when imported: a top-level command -> the modules that make it.
COMMANDS = {
    "catalog": ("cli.commands.catalog", "cli.commands.refresh"),
    "spend": ("cli.commands.spend",),
    "plan": ("cli.commands.plan",),
    "estimate": ("cli.commands.plan",),
    "stacks": ("cli.commands.stacks",),
    "preview": ("cli.commands.preview",),
    "diff": ("cli.commands.preview",),
    "render": ("cli.commands.render",),
    "events": ("cli.commands.events",),
    "data": ("cli.commands.data",),
}
COMMAND_MODULES = list(dict.fromkeys(m for modules in COMMANDS.values() for m in modules))


@app.callback()
def _group() -> None:
    """Keeps `trainfleet` a group of commands when a run registers only one of them."""


def _register(command: str | None = None) -> None:
    """Import the modules of `command` (every module for None or a name that is no command: help, errors)."""
    for name in COMMANDS.get(command or "", COMMAND_MODULES):
        importlib.import_module(name)


@functools.cache
def _command(name: str | None = None):
    """The click command tree for a run of command `name`, built once per process: Typer reads each registered
    command's signature and type hints to build it, and a run needs only its own (`trainfleet plan` is timed in
    benchmarks/plan_speed.py; the fuzz tests call main() in-process)."""
    _register(name)
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point; exits 2 with one line for any user error."""
    args = sys.argv[1:] if argv is None else argv
    command = _command(args[0] if args and args[0] in COMMANDS else None)
    try:
        result = command.main(args=argv, prog_name="trainfleet", standalone_mode=False)
    except TrainfleetError as exc:
        error_line(exc.message)
        sys.exit(2)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except Abort:
        error_line("aborted")
        sys.exit(130)
    except TyperException as exc:  # bad option, missing argument, bad choice (typer's vendored click)
        if type(exc).__name__ == "NoArgsIsHelpError":  # `trainfleet catalog` alone: show its help
            sys.stderr.write(exc.format_message() + "\n")
            sys.exit(2)
        error_line(" ".join(exc.format_message().split()) + " (see --help)")
        sys.exit(2)
    except BrokenPipeError:  # `trainfleet catalog list | head`
        sys.stderr.close()
        sys.exit(0)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
