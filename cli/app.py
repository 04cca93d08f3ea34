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

# Each module adds its commands to `app` when imported.
COMMAND_MODULES = [
    "cli.commands.catalog",
    "cli.commands.refresh",
    "cli.commands.spend",
    "cli.commands.plan",
    "cli.commands.stacks",
    "cli.commands.preview",
    "cli.commands.render",
    "cli.commands.events",
    "cli.commands.data",
]


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name)


@functools.cache
def _command():
    """The click command tree, built once per process: Typer reads every command's signature and type hints to
    build it, a fifth of a short command's time when the CLI runs in-process (the fuzz tests call main())."""
    _register()
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point; exits 2 with one line for any user error."""
    command = _command()
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
