"""A pytest plugin (``-p hide_packages``) that makes the packages named in $VQA_HIDE
(comma-separated) fail to import as if they were not installed: a machine that lacks them,
on this one."""
from __future__ import annotations

import os
import sys

HIDDEN = tuple(filter(None, os.environ.get("VQA_HIDE", "").split(",")))


class _Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by tests/support/hide_packages.py)", name=name)
        return None  # not hidden: the next finder looks


for _name in [m for m in sys.modules if m.split(".")[0] in HIDDEN]:
    del sys.modules[_name]
sys.meta_path.insert(0, _Hidden())
