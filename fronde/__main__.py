"""``python -m fronde`` runs the CLI."""

from fronde.cli import main

main()
