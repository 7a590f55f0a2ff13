"""vqa's test suite, one folder per subject; shared helpers live in tests/support/.

A package so that every test imports its helpers one way (``from tests.support.clips import ...``)
and two folders may hold files of the same name. See tests/README.md for the layout."""
