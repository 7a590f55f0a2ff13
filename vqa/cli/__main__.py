"""``python -m vqa.cli``: the ``vqa`` command."""
from vqa.cli import main

main()
