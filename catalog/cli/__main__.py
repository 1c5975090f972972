"""`python -m catalog.cli`: the `dumpcat` command."""

from catalog.cli.commands import main

main()
