"""Errors whose message is meant for the user: the CLI prints them as one paragraph, no traceback."""


class UserError(Exception):
    """Bad input (a config value, a missing or corrupt data file, an unusable device or directory)."""


class ConfigError(UserError, ValueError):
    """A config value that is not allowed; the message names the value and what is allowed."""


class DataError(UserError):
    """Data files that are missing, truncated or corrupt; the message names the path and the fix."""
