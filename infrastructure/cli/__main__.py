"""``python -m runledger.infrastructure.cli``: the same commands as the ``runledger`` script."""

from runledger.infrastructure.cli import main

main()
