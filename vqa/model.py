"""The model manifest (models/vqa.json): which files make the model, their sha256, its input.

Only the manifest is read here; the inference backends open the files it names, each
checked against its sha256 first, so a truncated or swapped file is an error, not a quiet
change in scores.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .aggregate import Decision
from .codes import ErrorCode
from .errors import ModelError
from .preprocess import Geometry

MANIFEST = "vqa.json"
ENV_MODEL_DIR = "VQA_MODEL_DIR"


def default_model_dir() -> Path:
    """$VQA_MODEL_DIR, else the checkout's models/, else the copy pip installed under share/."""
    if os.environ.get(ENV_MODEL_DIR):
        return Path(os.environ[ENV_MODEL_DIR])
    for candidate in (Path(__file__).resolve().parents[1] / "models", Path(sys.prefix) / "share" / "vqa" / "models"):
        if (candidate / MANIFEST).is_file():
            return candidate
    return Path(__file__).resolve().parents[1] / "models"


_DIGESTS: dict[tuple, str] = {}  # file identity -> sha256, for this process


def file_sha256(path: Path) -> str:
    """The file's sha256, computed once per file identity (device, inode, size, mtime and
    ctime; ctime cannot be set back by hand) in this process: a second Scorer does not hash
    the weights again, and a replaced or rewritten file is hashed anew."""
    st = os.stat(path)
    identity = (os.fspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    digest = _DIGESTS.get(identity)
    if digest is None:
        digest = _DIGESTS[identity] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


@dataclass(frozen=True)
class ModelSpec:
    name: str
    version: str
    directory: Path
    files: dict[str, str]
    sha256: dict[str, str]
    outputs: tuple[str, ...]
    view_size: int
    preprocessing: Geometry  # the manifest's "input" block: how frames become views
    decision: Decision  # the manifest's "decision" block: thresholds, luma bounds, category rules
    manifest_sha256: str  # of the manifest's bytes as read

    def path(self, key: str) -> Path:
        """The verified path of one model file (key as in the manifest's "files")."""
        if key not in self.files:
            raise ModelError(f"model {self.name} has no {key} file", code=ErrorCode.E_MODEL_MISSING)
        path = self.directory / self.files[key]
        if not path.is_file():
            raise ModelError(f"model file missing: {path}", code=ErrorCode.E_MODEL_MISSING)
        digest = file_sha256(path)
        if digest != self.sha256.get(key):
            raise ModelError(f"model file {path} is corrupt or was replaced: sha256 {digest[:12]}… "
                             f"does not match the manifest", code=ErrorCode.E_MODEL_CORRUPT)
        return path

    def record(self, files: Sequence[str]) -> dict:
        """A record's ``model`` block when the files ``files`` (manifest keys) ran: ``sha256``
        covers the manifest (its blocks, and through its sha256 every model file) and says
        which files ran: the sha256 of the manifest's digest, then each file's key and digest.

        >>> spec = load_model_spec()
        >>> spec.record(["pytorch"]) != spec.record(["openvino_xml", "openvino_bin"])
        True
        """
        h = hashlib.sha256(self.manifest_sha256.encode())
        for key in files:
            h.update(f"\n{key} {self.sha256[key]}".encode())
        return {"name": self.name, "version": self.version, "sha256": h.hexdigest()}


def load_model_spec(model_dir: str | os.PathLike | None = None) -> ModelSpec:
    directory = Path(model_dir) if model_dir is not None else default_model_dir()
    manifest = directory / MANIFEST
    try:
        raw = manifest.read_bytes()
        data = json.loads(raw)
        view = data["input"]
        # A model judges frames cut as it was trained on them: the cut is the manifest's.
        geometry = Geometry(int(view["grid"]), int(view["patch"]), int(view["work_short_side"]))
        if geometry.view != int(view["size"]):
            raise ValueError(f"input size {view['size']} is not grid x patch ({geometry.view})")
        return ModelSpec(name=data["name"], version=data["version"], directory=directory,
                         files=dict(data["files"]), sha256=dict(data["sha256"]),
                         outputs=tuple(data["outputs"]), view_size=int(view["size"]),
                         preprocessing=geometry, decision=Decision.from_manifest(data["decision"]),
                         manifest_sha256=hashlib.sha256(raw).hexdigest())
    except FileNotFoundError:
        raise ModelError(f"no model manifest at {manifest}; pass --model-dir or set {ENV_MODEL_DIR}",
                         code=ErrorCode.E_MODEL_MISSING) from None
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"model manifest {manifest} is unreadable: {e}", code=ErrorCode.E_MODEL_CORRUPT) from None
