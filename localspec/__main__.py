"""``python -m localspec`` runs the command line."""

from .cli import main

main()
