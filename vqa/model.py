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
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError
from .preprocess import WORK_SHORT_SIDE

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

    def path(self, key: str) -> Path:
        """The verified path of one model file (key as in the manifest's "files")."""
        if key not in self.files:
            raise ModelError(f"model {self.name} has no {key} file", code="E_MODEL_MISSING")
        path = self.directory / self.files[key]
        if not path.is_file():
            raise ModelError(f"model file missing: {path}", code="E_MODEL_MISSING")
        digest = file_sha256(path)
        if digest != self.sha256.get(key):
            raise ModelError(f"model file {path} is corrupt or was replaced: sha256 {digest[:12]}… "
                             f"does not match the manifest", code="E_MODEL_CORRUPT")
        return path

    def to_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "sha256": self.sha256["pytorch"]}


def load_model_spec(model_dir: str | os.PathLike | None = None) -> ModelSpec:
    directory = Path(model_dir) if model_dir is not None else default_model_dir()
    manifest = directory / MANIFEST
    try:
        data = json.loads(manifest.read_text())
        work = data["input"].get("work_short_side")
        if work != WORK_SHORT_SIDE:
            # A model judges frames at the scale it was trained at; another scale shifts every score.
            raise ModelError(f"model in {directory} was trained on frames judged at a short side of {work} px; "
                             f"this version of vqa cuts them at {WORK_SHORT_SIDE} px: use the models/ that came "
                             f"with it", code="E_MODEL_CORRUPT")
        return ModelSpec(name=data["name"], version=data["version"], directory=directory,
                         files=dict(data["files"]), sha256=dict(data["sha256"]),
                         outputs=tuple(data["outputs"]), view_size=int(data["input"]["size"]))
    except FileNotFoundError:
        raise ModelError(f"no model manifest at {manifest}; pass --model-dir or set {ENV_MODEL_DIR}",
                         code="E_MODEL_MISSING") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"model manifest {manifest} is unreadable: {e}", code="E_MODEL_CORRUPT") from None
