"""`python -m authbridge ARGS`: the host the platform wheel installed, as its `authbridge` command."""

from ._bundled import main

main()
