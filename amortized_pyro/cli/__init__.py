"""The command line (click): ``fit``, ``compare``, ``gap``, ``capacity`` and the rest (commands, gap_commands),
their options generated from the settings dataclasses (options), and how errors reach the user (common).
The only layer that speaks command-line syntax.
"""
from amortized_pyro.cli.commands import cli, main

__all__ = ["cli", "main"]
