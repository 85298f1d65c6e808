"""The one exception type the package raises for bad input; the CLI prints it as a single line."""


class AmortizedPyroError(Exception):
    """A user-facing error: bad option, missing or corrupt data, absent device, diverged run."""
