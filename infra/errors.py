"""The one exception type for problems a user can fix (bad config, unknown instance type, ...).

Everything user-facing raises `TrainfleetError` with a single line that names the problem and the fix;
the CLI catches it at one boundary and prints that line with exit code 2.
"""

import difflib


class TrainfleetError(Exception):
    """A problem in the user's input, with a one-line message that says how to fix it."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))  # always one line

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(TrainfleetError):
    """A stack config value is wrong."""


class CatalogError(TrainfleetError):
    """The catalog is missing, corrupt, or has no such entry."""


SHOWN_CHARS = 60


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A user's value as given, repr-quoted for a message, cut to about `limit` characters.

    `'$(id)'` stays `'$(id)'`; a 5,000-character value becomes its first characters, the closing quote and
    `... (5000 chars)`, so an error stays one readable line."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[: limit - 10]!r}... ({len(value)} chars)"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def did_you_mean(word: str, choices: list[str]) -> str:
    """' (did you mean X, Y?)' for close matches of a mistyped value, else ''."""
    close = difflib.get_close_matches(word, choices, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""
