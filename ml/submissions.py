# Long on purpose: one security boundary, read top to bottom: an untrusted archive checked step by step
# before anything loads it.
"""Model submissions: turn an uploaded zip into a verified artifact, or refuse it.

An upload is a zip of a Hugging Face-format model directory::

    config.json  model.safetensors  tokenizer.json  tokenizer_config.json  ...

optionally inside one top-level folder (people zip a folder).  Nothing in it is
trusted.  :func:`unpack_submission` checks it in this order and stops at the first
problem with a :class:`SubmissionRejected` whose message is meant for the submitter:

1. the upload itself: size limit; a real zip (starts with a local file header, no
   prepended data); one disk; the number of entries and the size of the central
   directory read from the end record *before* the directory is parsed (a 600 MB
   archive of empty entries would otherwise cost gigabytes of memory);
2. every entry of the central directory: not encrypted; a supported compression
   method; a safe relative path (no absolute path, drive letter, backslash, ``..``,
   ``.`` or empty component, control character, over-long name); a regular file or a
   folder (symbolic links and other special files, from the Unix mode in
   ``external_attr``, are refused); the declared size and compression ratio within
   the limits; no duplicate names (compared after Unicode NFC and case folding);
3. the layout: only the allowlisted file names (:data:`ALLOWED_FILES`), flat, at the
   top level or in one top-level folder; pickles, other weight formats and code are
   refused by name with the reason; ``config.json``, ``model.safetensors`` and a
   tokenizer are required.  macOS and git litter (``__MACOSX/``, ``.DS_Store``,
   ``.gitattributes``) is checked like everything else, then skipped;
4. extraction into a private temporary folder next to ``dest_dir``, streaming and
   counting the bytes actually produced: the header sizes are never trusted, an
   entry that unpacks to more than its allowance stops there;
5. the content: ``config.json`` is a JSON object with an allowlisted ``model_type``
   (:data:`ALLOWED_MODEL_TYPES`), sizes (layers, hidden size, heads, vocabulary,
   positions, intermediate size) within the task's :class:`ConfigBounds`, read from
   the JSON before anything is built, the architecture the task needs, no
   ``auto_map`` (remote code), and for classification the task's labels in index
   order; ``model.safetensors`` parses as safetensors; the config does not describe
   a bigger model than the weights hold (checked on the meta device, nothing
   allocated);
6. loading with transformers (safetensors only, local files only, no remote code,
   no missing weights, a fast tokenizer) and two forward passes on CPU through the
   inference helpers: a short input and one of the task's maximum length;
7. saving through :func:`ml.artifacts.save_artifact`, so ``dest_dir`` is an artifact
   of our own format that :func:`ml.artifacts.load_artifact` verifies and loads.

The temporary folder is removed whatever happens; on a refusal ``dest_dir`` is never
created.  Nothing is ever unpickled and no code from the upload is run.

Stages 1 to 3 alone are :func:`inspect_archive`: no decompression, no torch, cheap
enough for a web request.  Unpacking, loading and the forward pass run a hostile
model's code paths in transformers and tokenizers (and their configs may name
files to read): a worker calls :func:`unpack_submission` only in a child process
with memory and time limits, inside bubblewrap (no network, nothing of the
server's files but Python and this package: :mod:`ml.sandbox`), never in its own
process and never in a web process.
:func:`parameter_count` reads only the safetensors header and needs no torch.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import math
import os
import re
import shutil
import stat
import struct
import tempfile
import threading
import types
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .artifacts import ArtifactInfo, model_class_for, save_artifact
from .backbones import configure_torch_threads, import_transformers, quiet_transformers
from .errors import ArtifactError, MLError
from .spec import TaskSpec

MB = 1000 * 1000


class SubmissionRejected(MLError):
    """An uploaded model archive was refused.  ``reason`` (also ``str(exc)``) says
    what is wrong and what is allowed; it is shown to the submitter as is."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class SubmissionLimits:
    """Bounds on an uploaded archive (bytes are decimal: 1 MB = 10**6 bytes)."""

    #: Size of the uploaded zip file itself.
    max_archive_bytes: int = 600 * MB
    #: Sum of the unpacked sizes of the files that are extracted.
    max_total_bytes: int = 1500 * MB
    #: Entries in the archive, folders and skipped litter included.
    max_files: int = 50
    #: Largest unpacked:compressed ratio of one entry ...
    max_compression_ratio: int = 100
    #: ... checked only for entries that unpack to more than this.
    ratio_min_bytes: int = 1 * MB
    #: Each JSON config file and README.md.
    max_small_file_bytes: int = 5 * MB
    #: tokenizer.json, vocab.txt, vocab.json, merges.txt.
    max_tokenizer_file_bytes: int = 100 * MB


@dataclass(frozen=True)
class ConfigBounds:
    """Bounds on the sizes that ``config.json`` declares, checked on the JSON alone
    before any model is built: a config can ask for a model far bigger than its
    weights (10,000 layers) and building even its skeleton costs memory and time.

    The defaults admit every size of the allowlisted architectures up to the large
    variants (24 layers, hidden size 1024) with room to spare, and XLM-R's vocabulary.
    A task may set its own (``model_limits`` in the task config)."""

    #: num_hidden_layers (n_layers for DistilBERT, num_hidden_groups for ALBERT).
    max_layers: int = 48
    #: hidden_size (dim for DistilBERT, embedding_size for ALBERT).
    max_hidden_size: int = 4096
    #: num_attention_heads (n_heads for DistilBERT).
    max_attention_heads: int = 64
    #: vocab_size.
    max_vocab_size: int = 300_000
    #: max_position_embeddings (and DeBERTa's max_relative_positions, position_buckets).
    max_positions: int = 4096
    #: intermediate_size (hidden_dim for DistilBERT).
    max_intermediate_size: int = 16384
    #: type_vocab_size.
    max_type_vocab_size: int = 16
    #: ALBERT's inner_group_num (layers inside each shared group).
    max_inner_groups: int = 4

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> ConfigBounds:
        """The defaults with ``values`` (a task's ``model_limits``) in their place;
        unknown names are an error."""
        values = dict(values or {})
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown config bounds: {', '.join(unknown)}")
        return cls(**{name: int(value) for name, value in values.items()})


#: config.json keys with a size, the bound each is checked against, and the smallest
#: value allowed (DeBERTa uses -1 for "as max_position_embeddings"; a type vocabulary
#: may be empty).
_CONFIG_SIZES: tuple[tuple[str, str, int], ...] = (
    ("num_hidden_layers", "max_layers", 1),
    ("n_layers", "max_layers", 1),
    ("num_hidden_groups", "max_layers", 1),
    ("hidden_size", "max_hidden_size", 1),
    ("dim", "max_hidden_size", 1),
    ("embedding_size", "max_hidden_size", 1),
    ("num_attention_heads", "max_attention_heads", 1),
    ("n_heads", "max_attention_heads", 1),
    ("vocab_size", "max_vocab_size", 1),
    ("max_position_embeddings", "max_positions", 1),
    ("max_relative_positions", "max_positions", -1),
    ("position_buckets", "max_positions", -1),
    ("intermediate_size", "max_intermediate_size", 1),
    ("hidden_dim", "max_intermediate_size", 1),
    ("type_vocab_size", "max_type_vocab_size", 0),
    ("inner_group_num", "max_inner_groups", 1),
)


# -- allowlists ------------------------------------------------------------------------

#: model_type values accepted: encoder architectures that transformers loads without
#: remote code and that have both a sequence-classification and an extractive-QA head.
ALLOWED_MODEL_TYPES = (
    "albert",
    "bert",
    "camembert",
    "deberta",
    "deberta-v2",
    "distilbert",
    "electra",
    "mpnet",
    "roberta",
    "xlm-roberta",
)

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
#: Tokenizer files; the ones marked True can carry a whole tokenizer by themselves.
TOKENIZER_FILES = {
    "tokenizer.json": True,
    "vocab.txt": True,
    "vocab.json": True,  # with merges.txt (BPE)
    "merges.txt": False,
    "tokenizer_config.json": False,
    "special_tokens_map.json": False,
    "added_tokens.json": False,
}
#: Every file name a submission may contain (flat; nothing else is extracted).
ALLOWED_FILES = (
    CONFIG_FILE,
    WEIGHTS_FILE,
    *TOKENIZER_FILES,
    "generation_config.json",
    "README.md",
)
_LARGE_TOKENIZER_FILES = {"tokenizer.json", "vocab.txt", "vocab.json", "merges.txt"}

#: Skipped without being extracted (after the same path and type checks as the rest).
_LITTER_NAMES = {".DS_Store", ".gitattributes"}
_LITTER_FOLDER = "__MACOSX"

_PICKLE_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt")
_REFUSED_SUFFIXES: dict[tuple[str, ...], str] = {
    _PICKLE_WEIGHTS: "pickle-based weights are never loaded; convert to model.safetensors",
    (".pkl", ".pickle", ".joblib", ".npy", ".npz"): (
        "pickle files are never loaded (unpickling can run code); remove it"
    ),
    (".h5", ".keras", ".ckpt.index"): (
        "TensorFlow/Keras weights are not supported; convert to model.safetensors"
    ),
    (".msgpack",): "Flax weights are not supported; convert to model.safetensors",
    (".onnx", ".gguf", ".ggml", ".tflite"): (
        "only safetensors weights are supported; convert to model.safetensors"
    ),
    (".py", ".pyc", ".pyo", ".so", ".dll", ".dylib", ".sh", ".exe", ".ipynb"): (
        "code is never run (no remote code); submit a built-in transformers architecture "
        "and remove code files"
    ),
}
_SHARD = re.compile(r"^model-\d+-of-\d+\.safetensors$|^model\.safetensors\.index\.json$")

#: config.json keys refused outright, with the reason.
_REFUSED_CONFIG_KEYS = {
    "auto_map": "auto_map refers to custom code, which is never run (no remote code); remove "
    "auto_map and use a built-in architecture",
    "quantization_config": "quantization_config is set, but quantized models are not "
    "supported; submit float32, float16 or bfloat16 weights",
    "attn_implementation": "attn_implementation is not allowed (it can name kernels to "
    "download); remove it",
    "_attn_implementation": "_attn_implementation is not allowed (it can name kernels to "
    "download); remove it",
}

_SUPPORTED_COMPRESSION = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}
_MAX_NAME_CHARS = 255
#: Bytes of central directory allowed per entry (46 fixed + name + extra fields).
_CENTRAL_DIRECTORY_BYTES_PER_ENTRY = 4096
_MAX_SAFETENSORS_HEADER = 100 * MB
_CHUNK = 1 << 20
_SAMPLE_TEXT = "This is a short sentence to check that the model runs."


# -- small helpers -----------------------------------------------------------------------


def _size(n: int) -> str:
    if n >= 1000 * MB:
        return f"{n / (1000 * MB):.1f} GB"
    if n >= MB:
        return f"{n / MB:.1f} MB"
    if n >= 1000:
        return f"{n / 1000:.1f} kB"
    return f"{n} bytes"


def _shown(name: str, limit: int = 120) -> str:
    """A file name as it may be shown: non-printable characters escaped, shortened."""
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reject(name: str | None, reason: str) -> SubmissionRejected:
    return SubmissionRejected(f"{_shown(name)}: {reason}" if name is not None else reason)


def _allowed_list() -> str:
    return ", ".join(ALLOWED_FILES)


def parameter_count(path: str | os.PathLike) -> int:
    """Number of values stored in a safetensors file, from its header alone.

    ``path`` is a ``.safetensors`` file or a directory holding ``model.safetensors``
    (an artifact).  No weights are read and torch is not imported.  Raises
    :class:`ArtifactError` when the file is missing or its header is invalid.
    """
    target = Path(path)
    if target.is_dir():
        target = target / WEIGHTS_FILE
    try:
        size = target.stat().st_size
        with open(target, "rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise ArtifactError(f"{target}: too short to be a safetensors file")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(_MAX_SAFETENSORS_HEADER, size - 8):
                raise ArtifactError(f"{target}: invalid safetensors header length")
            header = json.loads(fh.read(header_len).decode("utf-8"))
    except OSError as exc:
        raise ArtifactError(f"{target}: cannot be read: {exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{target}: safetensors header is not valid JSON") from exc
    if not isinstance(header, dict):
        raise ArtifactError(f"{target}: safetensors header is not a JSON object")
    total = 0
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ArtifactError(f"{target}: tensor {key!r} has no valid shape")
        total += math.prod(shape)
    return total


# -- stage 1: the archive as a whole ------------------------------------------------------

_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record, 22 bytes
_EOCD64_LOCATOR = struct.Struct("<4sLQL")  # 20 bytes
_EOCD64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory record, 56 bytes
_NOT_A_ZIP = (
    "the upload is not a zip archive; zip the model folder (config.json, model.safetensors "
    "and the tokenizer files) and upload the .zip file"
)
_MULTI_DISK = "the archive spans several disks (a split zip); upload a single .zip file"


def _check_archive(path: Path, limits: SubmissionLimits) -> None:
    """Size, signature and end record, before zipfile parses the central directory."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SubmissionRejected("the uploaded file cannot be read") from exc
    if size == 0:
        raise SubmissionRejected("the uploaded file is empty")
    if size > limits.max_archive_bytes:
        raise SubmissionRejected(
            f"the archive is {_size(size)}; the limit is {_size(limits.max_archive_bytes)}"
        )
    with open(path, "rb") as fh:
        signature = fh.read(4)
        if signature == b"PK\x05\x06":
            raise SubmissionRejected("the archive is empty")
        if signature != b"PK\x03\x04":
            raise SubmissionRejected(_NOT_A_ZIP)
        tail_len = min(size, _EOCD.size + 0xFFFF)
        fh.seek(size - tail_len)
        tail = fh.read(tail_len)
        pos = tail.rfind(b"PK\x05\x06")
        if pos < 0 or pos + _EOCD.size > len(tail):
            raise SubmissionRejected(
                "the archive is not a valid zip file (no end of central directory record)"
            )
        _, disk, cd_disk, entries_here, entries, cd_size, _, _ = _EOCD.unpack_from(tail, pos)
        if 0xFFFF in (disk, cd_disk, entries_here, entries) or cd_size == 0xFFFFFFFF:
            # zip64: the real values are in the zip64 end record
            end_at = size - tail_len + pos
            if end_at < _EOCD64_LOCATOR.size:
                raise SubmissionRejected("the archive is not a valid zip file (bad zip64 record)")
            fh.seek(end_at - _EOCD64_LOCATOR.size)
            sig, record_disk, record_at, disks = _EOCD64_LOCATOR.unpack(
                fh.read(_EOCD64_LOCATOR.size)
            )
            if sig != b"PK\x06\x07":
                raise SubmissionRejected("the archive is not a valid zip file (bad zip64 record)")
            if record_disk != 0 or disks > 1:
                raise SubmissionRejected(_MULTI_DISK)
            if record_at > size - _EOCD64.size:
                raise SubmissionRejected("the archive is not a valid zip file (bad zip64 record)")
            fh.seek(record_at)
            record = _EOCD64.unpack(fh.read(_EOCD64.size))
            if record[0] != b"PK\x06\x06":
                raise SubmissionRejected("the archive is not a valid zip file (bad zip64 record)")
            disk, cd_disk, entries_here, entries, cd_size = record[4:9]
    if disk != 0 or cd_disk != 0 or entries_here != entries:
        raise SubmissionRejected(_MULTI_DISK)
    if entries == 0:
        raise SubmissionRejected("the archive is empty")
    _check_entry_count(entries, limits)
    if cd_size > limits.max_files * _CENTRAL_DIRECTORY_BYTES_PER_ENTRY:
        raise SubmissionRejected(
            f"the archive's file list is {_size(cd_size)}, far too large for at most "
            f"{limits.max_files} files"
        )


def _check_entry_count(count: int, limits: SubmissionLimits) -> None:
    if count > limits.max_files:
        raise SubmissionRejected(
            f"the archive has {count} entries; the limit is {limits.max_files} "
            f"(a submission needs only: {_allowed_list()})"
        )


# -- stage 2: each entry ---------------------------------------------------------------


def _path_problem(raw: str) -> str | None:
    """Why ``raw`` (a name from the central directory) is not a safe relative path."""
    if not raw:
        return "an entry has an empty name"
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        return "control characters are not allowed in file names"
    if "\\" in raw:
        return "backslashes are not allowed in file names (use '/' between folders)"
    if raw.startswith("/"):
        return (
            "absolute paths are not allowed; zip the files with paths relative to the model folder"
        )
    if re.match(r"^[A-Za-z]:", raw):
        return "drive letters are not allowed in file names"
    parts = (raw[:-1] if raw.endswith("/") else raw).split("/")
    if ".." in parts:
        return "'..' is not allowed in a path (it would write outside the model folder)"
    if any(part in ("", ".") for part in parts):
        return "empty or '.' path components are not allowed"
    if len(raw) > _MAX_NAME_CHARS:
        return f"the name is too long (at most {_MAX_NAME_CHARS} characters)"
    return None


def _type_problem(info: zipfile.ZipInfo) -> str | None:
    """Refuse symbolic links and other special files (Unix mode in external_attr)."""
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind in (0, stat.S_IFREG, stat.S_IFDIR):
        return None
    if kind == stat.S_IFLNK:
        return "symbolic links are not allowed; put the file itself in the archive"
    names = {
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
        stat.S_IFIFO: "a named pipe",
        stat.S_IFSOCK: "a socket",
    }
    return f"only regular files and folders are allowed; this entry is {names.get(kind, 'a special file')}"


def _check_entry(info: zipfile.ZipInfo, limits: SubmissionLimits) -> None:
    raw = info.orig_filename
    if info.flag_bits & 0x1:
        raise _reject(raw, "the entry is encrypted; upload an archive without a password")
    if info.volume != 0:
        raise SubmissionRejected(_MULTI_DISK)
    if info.compress_type not in _SUPPORTED_COMPRESSION:
        raise _reject(
            raw,
            f"compression method {info.compress_type} is not supported; use deflate (the "
            "usual zip compression) or none",
        )
    problem = _path_problem(raw) or _type_problem(info)
    if problem:
        raise _reject(raw, problem)
    if info.is_dir():
        return
    if (
        info.file_size > limits.ratio_min_bytes
        and info.file_size > limits.max_compression_ratio * max(info.compress_size, 1)
    ):
        ratio = info.file_size / max(info.compress_size, 1)
        raise _reject(
            raw,
            f"compresses {ratio:,.0f}:1 ({_size(info.file_size)} from "
            f"{_size(info.compress_size)}), more than the {limits.max_compression_ratio}:1 "
            "allowed; this looks like a zip bomb",
        )


def _normalised(raw: str) -> str:
    return unicodedata.normalize("NFC", raw.rstrip("/")).casefold()


def _is_litter(raw: str) -> bool:
    parts = raw.rstrip("/").split("/")
    return parts[0] == _LITTER_FOLDER or parts[-1] in _LITTER_NAMES


# -- stage 3: the layout ---------------------------------------------------------------


def _refusal_for_name(name: str) -> str | None:
    """Why a file called ``name`` (no folder) is refused, or None if it is allowed."""
    if name in ALLOWED_FILES:
        return None
    if _SHARD.match(name):
        return (
            "sharded weights are not supported; save the model as one model.safetensors "
            '(save_pretrained(..., max_shard_size="2GB"))'
        )
    lower = name.lower()
    for suffixes, reason in _REFUSED_SUFFIXES.items():
        if lower.endswith(suffixes):
            return reason
    if lower.endswith(".safetensors"):
        return "the weights must be in a file named exactly model.safetensors"
    return f"not an allowed file; a submission may contain only: {_allowed_list()}"


def _plan(
    infos: list[zipfile.ZipInfo], limits: SubmissionLimits
) -> list[tuple[zipfile.ZipInfo, str]]:
    """The entries to extract, as ``(info, allowed file name)``; refuses everything else."""
    files = [i for i in infos if not i.is_dir() and not _is_litter(i.orig_filename)]
    folders = [i for i in infos if i.is_dir() and not _is_litter(i.orig_filename)]
    prefix = ""
    tops = {i.orig_filename.split("/", 1)[0] for i in files}
    if files and all("/" in i.orig_filename for i in files) and len(tops) == 1:
        prefix = tops.pop() + "/"
    for folder in folders:
        if folder.orig_filename != prefix:
            raise _reject(
                folder.orig_filename,
                "sub-folders are not allowed; put the model files at the top of the archive "
                "or in one top-level folder",
            )
    plan = []
    for info in files:
        name = info.orig_filename[len(prefix) :]
        if "/" in name:
            raise _reject(
                info.orig_filename,
                "sub-folders are not allowed; put the model files at the top of the archive "
                "or in one top-level folder",
            )
        reason = _refusal_for_name(name)
        if reason:
            raise _reject(info.orig_filename, reason)
        cap = _file_cap(name, limits)
        if info.file_size > cap:
            raise _reject(
                info.orig_filename,
                f"is {_size(info.file_size)}; the limit for this file is {_size(cap)}",
            )
        plan.append((info, name))
    names = {name for _, name in plan}
    if CONFIG_FILE not in names:
        raise SubmissionRejected(
            "the archive has no config.json; it needs config.json, model.safetensors and the "
            "tokenizer files, at the top level or in one folder"
        )
    if WEIGHTS_FILE not in names:
        raise SubmissionRejected(
            "the archive has no model.safetensors; the weights must be one model.safetensors "
            "file (pickle-based .bin/.pt weights are never loaded)"
        )
    if not any(TOKENIZER_FILES.get(n) for n in names):
        raise SubmissionRejected(
            "the archive has no tokenizer; include tokenizer.json (a fast tokenizer, from "
            "tokenizer.save_pretrained) and tokenizer_config.json"
        )
    total = sum(info.file_size for info, _ in plan)
    if total > limits.max_total_bytes:
        raise SubmissionRejected(
            f"the files unpack to {_size(total)}; the limit is {_size(limits.max_total_bytes)}"
        )
    return plan


def _file_cap(name: str, limits: SubmissionLimits) -> int:
    if name == WEIGHTS_FILE:
        return limits.max_total_bytes
    if name in _LARGE_TOKENIZER_FILES:
        return limits.max_tokenizer_file_bytes
    return limits.max_small_file_bytes


# -- stage 4: extraction ---------------------------------------------------------------

_DAMAGED = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    EOFError,
    RuntimeError,  # zipfile: "File ... is encrypted, password required"
    NotImplementedError,
    ValueError,
    OSError,  # bz2 decompression errors
    struct.error,
    zlib.error,
    lzma.LZMAError,
)


def _read_chunks(source, raw: str) -> Iterator[bytes]:
    """Decompressed chunks of one entry; archive damage becomes a rejection."""
    while True:
        try:
            chunk = source.read(_CHUNK)
        except _DAMAGED as exc:
            raise _reject(raw, f"cannot be unpacked; the archive is damaged ({exc})") from exc
        if not chunk:
            return
        yield chunk


def _copy_bounded(
    source, target, raw: str, limit: int, compressed: int, limits: SubmissionLimits
) -> int:
    """Copy ``source`` to ``target``, counting the bytes actually produced; stop as soon
    as they pass ``limit`` or the compression-ratio bound (header sizes are not
    trusted).  Returns the number of bytes written."""
    written = 0
    for chunk in _read_chunks(source, raw):
        written += len(chunk)
        if written > limit:
            raise _reject(
                raw,
                f"unpacks to more than {_size(limit)}, more than allowed (or than the archive "
                "says); this looks like a zip bomb",
            )
        if written > limits.ratio_min_bytes and written > limits.max_compression_ratio * max(
            compressed, 1
        ):
            raise _reject(
                raw,
                f"unpacks to more than {limits.max_compression_ratio} times its compressed "
                "size; this looks like a zip bomb",
            )
        target.write(chunk)
    return written


def _extract(
    archive: zipfile.ZipFile,
    plan: list[tuple[zipfile.ZipInfo, str]],
    folder: Path,
    limits: SubmissionLimits,
) -> None:
    budget = limits.max_total_bytes
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for info, name in plan:
        raw = info.orig_filename
        limit = min(_file_cap(name, limits), budget)
        try:
            source = archive.open(info)
        except _DAMAGED as exc:
            raise _reject(raw, f"cannot be unpacked; the archive is damaged ({exc})") from exc
        with source, os.fdopen(os.open(folder / name, flags, 0o600), "wb") as target:
            budget -= _copy_bounded(source, target, raw, limit, info.compress_size, limits)


# -- stage 5: content --------------------------------------------------------------------


def _read_json_object(path: Path, name: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _reject(name, f"is not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise _reject(name, "is not valid JSON (nested too deeply)") from exc
    if not isinstance(data, dict):
        raise _reject(name, "must be a JSON object")
    return data


def _check_safetensors(path: Path) -> int:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            keys = list(handle.keys())
        count = parameter_count(path)
    except Exception as exc:  # SafetensorError, ArtifactError, ...
        raise _reject(
            WEIGHTS_FILE,
            f"is not a valid safetensors file ({_short(exc)}); save the model with "
            "save_pretrained(..., safe_serialization=True)",
        ) from exc
    if not keys:
        raise _reject(WEIGHTS_FILE, "holds no tensors")
    return count


def _expected_architecture(model_type: str, spec: TaskSpec) -> str:
    import_transformers()  # the package first, under its lock; then its submodule
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES,
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    )

    names = (
        MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES
        if spec.is_qa
        else MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES
    )
    return names[model_type]


def _task_words(spec: TaskSpec) -> str:
    return "extractive QA task" if spec.is_qa else "classification task"


def check_config_sizes(config: dict[str, Any], bounds: ConfigBounds) -> dict[str, int]:
    """Refuse a config.json (already parsed, JSON only) that declares a size over
    ``bounds`` or a size that is not a whole number; returns the sizes it declares.
    Nothing is built and transformers is not imported."""
    sizes: dict[str, int] = {}
    for key, bound_name, smallest in _CONFIG_SIZES:
        if key not in config:
            continue
        value = config[key]
        bound = getattr(bounds, bound_name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise _reject(
                CONFIG_FILE,
                f"{key} is {json.dumps(value)[:40]}; it must be a whole number from "
                f"{smallest} to {bound:,}",
            )
        if value > bound:
            raise _reject(
                CONFIG_FILE,
                f"{key} is {value:,}, over this task's limit of {bound:,} ({bound_name}); "
                "the model was refused before anything was built",
            )
        if value < smallest:
            raise _reject(CONFIG_FILE, f"{key} is {value:,}; it must be at least {smallest}")
        sizes[key] = value
    return sizes


def _check_config(config: dict[str, Any], spec: TaskSpec, bounds: ConfigBounds) -> str:
    """Validate config.json; returns its model_type."""
    for key, reason in _REFUSED_CONFIG_KEYS.items():
        if key in config:
            raise _reject(CONFIG_FILE, reason)
    model_type = config.get("model_type")
    allowed = ", ".join(ALLOWED_MODEL_TYPES)
    if not isinstance(model_type, str) or not model_type:
        raise _reject(CONFIG_FILE, f"model_type is missing; supported model types: {allowed}")
    if model_type not in ALLOWED_MODEL_TYPES:
        raise _reject(
            CONFIG_FILE,
            f"model_type {_shown(model_type, 60)!r} is not supported; supported model types: "
            f"{allowed}",
        )
    check_config_sizes(config, bounds)  # before transformers is asked about anything
    expected = _expected_architecture(model_type, spec)
    architectures = config.get("architectures")
    if architectures != [expected]:
        found = json.dumps(architectures)[:200] if architectures is not None else "missing"
        raise _reject(
            CONFIG_FILE,
            f"architectures is {found}, but a {model_type!r} model for this "
            f'{_task_words(spec)} must be ["{expected}"]',
        )
    if spec.is_classification:
        _check_labels(config, spec)
    return model_type


def _check_labels(config: dict[str, Any], spec: TaskSpec) -> None:
    expected = {str(i): label for i, label in enumerate(spec.labels)}
    wanted = json.dumps(expected, ensure_ascii=False)
    id2label = config.get("id2label")
    if id2label is None:
        raise _reject(CONFIG_FILE, f"id2label is missing; this task needs id2label = {wanted}")
    if id2label != expected:
        found = json.dumps(id2label, ensure_ascii=False)
        if len(found) > 300:
            found = found[:297] + "..."
        raise _reject(
            CONFIG_FILE,
            f"id2label is {found}; this task needs exactly {wanted} (these label names, in "
            "this index order)",
        )
    num_labels = config.get("num_labels")
    if num_labels is not None and num_labels != len(spec.labels):
        raise _reject(
            CONFIG_FILE,
            f"num_labels is {json.dumps(num_labels)[:40]} but this task has "
            f"{len(spec.labels)} labels ({', '.join(spec.labels)})",
        )


def _check_tokenizer_config(folder: Path) -> None:
    path = folder / "tokenizer_config.json"
    if not path.exists():
        return
    data = _read_json_object(path, "tokenizer_config.json")
    if "auto_map" in data:
        raise _reject(
            "tokenizer_config.json",
            "auto_map refers to custom tokenizer code, which is never run (no remote code); "
            "remove auto_map and use a built-in tokenizer",
        )


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95})?")


def _backbone_name(config: dict[str, Any], model_type: str) -> str:
    """config.json's ``_name_or_path`` when it looks like a Hub model id (a local path
    would show the submitter's folders on a public page), else the model type."""
    name = config.get("_name_or_path")
    if isinstance(name, str) and _HUB_ID.fullmatch(name) and ".." not in name:
        return name
    return model_type


# -- stage 6: load and run ---------------------------------------------------------------


def _short(exc: BaseException, folder: Path | None = None, limit: int = 400) -> str:
    text = str(exc) or type(exc).__name__
    if folder is not None:
        text = text.replace(str(folder), "<upload>")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _load(folder: Path, spec: TaskSpec, stored_values: int):
    """Load the extracted model and tokenizer on CPU, refusing anything that would not
    run as submitted."""
    import torch


    transformers = import_transformers()
    quiet_transformers()
    configure_torch_threads()
    model_class = model_class_for(spec)
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        with torch.device("meta"):  # nothing allocated: only the parameter count
            skeleton = model_class.from_config(config, trust_remote_code=False)
        needed = sum(p.numel() for p in skeleton.parameters())
        del skeleton
    except Exception as exc:
        raise _reject(
            CONFIG_FILE, f"does not describe a model that can be built ({_short(exc, folder)})"
        ) from exc
    if needed > stored_values:
        raise SubmissionRejected(
            f"config.json describes a model with {needed:,} parameters but model.safetensors "
            f"holds only {stored_values:,} values; the weights do not fit the config"
        )
    try:
        model, loading = model_class.from_pretrained(
            folder,
            use_safetensors=True,
            local_files_only=True,
            trust_remote_code=False,
            output_loading_info=True,
        )
    except Exception as exc:
        raise SubmissionRejected(f"the model could not be loaded: {_short(exc, folder)}") from exc
    missing = sorted(loading.get("missing_keys") or [])
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise _reject(
            WEIGHTS_FILE,
            f"lacks weights the model needs ({shown}); they would be random. Save the whole "
            "fine-tuned model with save_pretrained",
        )
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:
        raise SubmissionRejected(
            f"the tokenizer could not be loaded: {_short(exc, folder)}"
        ) from exc
    if not getattr(tokenizer, "is_fast", False):
        raise SubmissionRejected(
            "the tokenizer is not a fast tokenizer; include tokenizer.json (save the tokenizer "
            "loaded with AutoTokenizer)"
        )
    if spec.is_classification and model.config.num_labels != len(spec.labels):
        raise _reject(
            CONFIG_FILE,
            f"the model has {model.config.num_labels} outputs; this task has "
            f"{len(spec.labels)} labels",
        )
    model.to(torch.device("cpu"))
    model.eval()
    return model, tokenizer


def _sample_rows(spec: TaskSpec) -> tuple[dict[str, str], dict[str, str]]:
    """A short input and one that fills the task's maximum length."""
    long_text = " ".join(["word"] * (spec.max_tokens * 2))
    if spec.is_qa:
        short = {
            "passage": "The sky in the test passage is blue.",
            "question": "What colour is the sky?",
        }
        return short, {"passage": long_text, "question": "What is the word?"}
    return (
        {name: _SAMPLE_TEXT for name in spec.input_fields},
        {name: long_text for name in spec.input_fields},
    )


def _try_forward(model: Any, tokenizer: Any, spec: TaskSpec, folder: Path) -> None:
    import torch

    from .inference import answer_questions, classify

    holder = types.SimpleNamespace(
        model=model,
        tokenizer=tokenizer,
        spec=spec,
        device=torch.device("cpu"),
        tokenizer_lock=threading.Lock(),
    )
    short, long = _sample_rows(spec)
    for row, what in (
        (short, "a short test input"),
        (long, f"a test input of {spec.max_tokens} tokens (this task's maximum length)"),
    ):
        try:
            if spec.is_qa:
                result = answer_questions(holder, [row])[0]
                values = [result["score"]]
            else:
                result = classify(holder, [row])[0]
                values = list(result["probabilities"].values())
        except Exception as exc:
            raise SubmissionRejected(f"the model failed on {what}: {_short(exc, folder)}") from exc
        if not all(isinstance(v, float) and math.isfinite(v) for v in values):
            raise SubmissionRejected(
                f"the model's output on {what} is not a finite number (NaN or infinity)"
            )


# -- the entry point ---------------------------------------------------------------------


def _archive_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _open_checked(
    archive_path: Path, limits: SubmissionLimits
) -> tuple[zipfile.ZipFile, list[tuple[zipfile.ZipInfo, str]]]:
    """Stages 1 to 3: the open archive and the entries to extract, or a refusal."""
    _check_archive(archive_path, limits)
    try:
        archive = zipfile.ZipFile(archive_path)
    except zipfile.BadZipFile as exc:
        if "multiple disks" in str(exc):
            raise SubmissionRejected(_MULTI_DISK) from exc
        raise SubmissionRejected(f"the archive is not a valid zip file ({_short(exc)})") from exc
    except _DAMAGED as exc:
        raise SubmissionRejected(f"the archive is not a valid zip file ({_short(exc)})") from exc
    try:
        infos = archive.infolist()
        _check_entry_count(len(infos), limits)
        seen: dict[str, str] = {}
        for info in infos:
            _check_entry(info, limits)
            key = _normalised(info.orig_filename)
            if key in seen:
                raise _reject(
                    info.orig_filename,
                    f"appears twice in the archive (as {_shown(seen[key])!r} too; names are "
                    "compared ignoring case)",
                )
            seen[key] = info.orig_filename
        return archive, _plan(infos, limits)
    except BaseException:
        archive.close()
        raise


def inspect_archive(
    zip_path: str | os.PathLike,
    *,
    limits: SubmissionLimits = SubmissionLimits(),  # noqa: B008  (frozen, immutable)
) -> list[str]:
    """Stages 1 to 3 only, without unpacking anything: the upload is a zip within the
    limits whose entries are safe, allowlisted file names.  Reads the end record and
    the central directory (bounded by ``limits.max_files``), decompresses nothing and
    writes nothing, and needs neither torch nor transformers: cheap enough for a web
    request, so junk is refused at once.  Returns the file names that would be
    extracted; raises :class:`SubmissionRejected`."""
    archive, plan = _open_checked(Path(zip_path), limits)
    archive.close()
    return [name for _, name in plan]


def unpack_submission(
    zip_path: str | os.PathLike,
    dest_dir: str | os.PathLike,
    spec: TaskSpec,
    *,
    limits: SubmissionLimits = SubmissionLimits(),  # noqa: B008  (frozen, immutable)
    bounds: ConfigBounds = ConfigBounds(),  # noqa: B008  (frozen, immutable)
    progress: Callable[[str], None] | None = None,
) -> ArtifactInfo:
    """Check an uploaded model zip for ``spec`` and save it as an artifact at ``dest_dir``.

    Returns the new artifact's :class:`ArtifactInfo` (``training_data`` in its metadata
    is ``{"source": "submission", "archive_sha256": ...}``).  Raises
    :class:`SubmissionRejected` with a reason for the submitter when the upload is
    refused (see the module docstring for the checks, in order); ``dest_dir`` is then
    not created.  Raises :class:`ArtifactError` if ``dest_dir`` already exists.
    Extraction uses a temporary folder in ``dest_dir``'s parent, removed at the end
    whatever happens; nothing else is written.  ``progress`` gets a line at the end of
    each stage.

    This loads an untrusted model in the calling process: a worker runs it in a child
    process with memory and time limits (:func:`ml.sandbox.check_in_child`).
    """
    say = progress or (lambda line: None)
    archive_path = Path(zip_path)
    dest = Path(dest_dir).absolute()
    if dest.exists():
        raise ArtifactError(f"artifact directory {dest} already exists")

    archive, plan = _open_checked(archive_path, limits)
    with archive:
        say(f"the archive's {len(plan)} files are allowed")
        dest.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".{dest.name}.upload-", dir=dest.parent))
        try:
            _extract(archive, plan, folder, limits)
            archive.close()
            say(f"unpacked {_size(sum(info.file_size for info, _ in plan))}")
            config = _read_json_object(folder / CONFIG_FILE, CONFIG_FILE)
            model_type = _check_config(config, spec, bounds)
            say(f"config.json: a {model_type} model within the task's limits")
            stored_values = _check_safetensors(folder / WEIGHTS_FILE)
            _check_tokenizer_config(folder)
            model, tokenizer = _load(folder, spec, stored_values)
            say(f"loaded the model ({stored_values:,} values) and its tokenizer")
            _try_forward(model, tokenizer, spec, folder)
            say("ran the model on a short input and on one of the task's maximum length")
            info = save_artifact(
                model,
                tokenizer,
                spec,
                dest,
                backbone=_backbone_name(config, model_type),
                training_data={
                    "source": "submission",
                    "archive_sha256": _archive_sha256(archive_path),
                },
            )
            say("saved as an artifact")
            return info
        finally:
            shutil.rmtree(folder, ignore_errors=True)
