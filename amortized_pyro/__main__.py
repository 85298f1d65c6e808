from amortized_pyro.cli.commands import main

main()
