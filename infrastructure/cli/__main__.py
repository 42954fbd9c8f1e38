"""``python -m runledger.infrastructure.cli``: the same commands as the ``runledger`` script."""

from runledger.infrastructure.cli.app import main

main()
