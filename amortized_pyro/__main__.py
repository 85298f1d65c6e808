"""``python -m amortized_pyro``: the command line. A Ctrl-C while torch and Pyro are still being imported ends
in one line and exit status 130, as a Ctrl-C during a command does."""
import sys

try:
    from amortized_pyro.cli.commands import main
except KeyboardInterrupt:
    sys.stderr.write("Error: interrupted while starting; nothing was written\n")
    sys.exit(130)

main()
