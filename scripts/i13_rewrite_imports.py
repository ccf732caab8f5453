"""Rewrite imports from the layout before issue 13 to pipeline/core + transforms/images.

One-off migration aid for branches made before the move (delete after merging them):

    python scripts/i13_rewrite_imports.py FILE...        # rewrites in place, prints what to check

Run it from the repository root on the new layout (it reads transforms/images to learn where
each moved name is bound), then `ruff check --select I --fix` on the same files to merge and sort
the import lines. Handles `from pipeline import a, b`, `from pipeline.X import ...`,
`from transforms.image_check import ...` (name by name), `from transforms import image_check
[as ic]` with `ic.NAME` uses and `monkeypatch.setattr(ic, "NAME", v)` (one setattr per module
whose globals hold NAME, so every caller sees the patch), names that moved between modules
(store_modes -> schema/write_shards, LISTING_REASONS and decoder_error -> rejects, ...), dotted
module names in strings, and the file paths named in docs. What it cannot map it prints.
"""

from __future__ import annotations

import re
import sys

# Modules moved whole.
MODULES = {
    "pipeline.schema": "pipeline.core.schema",
    "pipeline.storage": "pipeline.core.storage",
    "pipeline.errors": "pipeline.core.errors",
    "pipeline.normalize": "pipeline.core.normalize",
    "pipeline.raw_pixels": "pipeline.core.raw_pixels",
    "pipeline.shard_cache": "pipeline.core.shard_cache",
    "pipeline.versions": "pipeline.core.versions",
    "pipeline.changes": "pipeline.core.changes",
    "transforms.decode_worker": "transforms.images.decode_worker",
    "transforms.store_modes": "transforms.images.store_modes",
}
_IMAGES = "transforms.images."
# transforms.image_check, name by name.
_IC = {
    "pipeline.core.rejects": "REASONS Rejected",
    _IMAGES + "limits": "CheckOptions DEFAULT_MAX_PIXELS TRANSCODE_MODES JPEG_VERIFY_MODES "
    "RESIZE_FILTERS MAX_PROGRESSIVE_SCANS STORED_FORMATS _TF_DECODABLE_OTHER check_file_size "
    "_check_dims",
    _IMAGES + "sniff": "_MAGIC _UNDECODABLE _HEIF_BRANDS _NON_IMAGE sniff_format _cut_signature "
    "_describe_non_image _undecodable_image _BMP_HEADER_SIZES _is_bmp _is_tga _CONTAINERS "
    "sniff_container",
    _IMAGES + "headers": "_SOF _SOF_PROGRESSIVE _SOF_NAMES _ORIENTATION_TRANSPOSE _MAX_ICC_BYTES "
    "_Header _u16be _exif_orientation _probe_jpeg _probe_png _inflate_icc _skip_gif_blocks "
    "_probe_gif _webp_size _webp_as_is _webp_alpha",
    _IMAGES + "pillow_probe": "_PIL_HEADER_ERRORS _MODE_CHANNELS _pillow_open _PIL_PLUGINS "
    "_NO_PIXELS _IN_PROCESS _pil_header _pil_pixels _not_decodable _probe_other _normalize_mode",
    _IMAGES + "decode": "_TF_MAX_OUTPUT _tf _tf_message _VERIFY_DCT_RATIO _STRICT_COLORSPACE "
    "_LIBJPEG_WARNINGS _libjpeg_warning _dct_side _dct_shape _tf_decode _decode_failure "
    "_jpeg_diagnosis _gif_diagnosis _png_diagnosis",
    _IMAGES + "stats": "_channel_stats",
    _IMAGES + "transcode": "TRANSCODE_REASONS _transcode_deferred _transcode_reasons _transcode "
    "_max_side_plan _icc_matches _source_pixels",
    _IMAGES + "check": "ImageInfo _probe _probe_checked check_image encode_for_storage",
}
# Old module -> {name: new module} for modules split by name.
NAMES = {
    "transforms.image_check": {n: m for m, names in _IC.items() for n in names.split()},
    "transforms.store_modes": {
        "STORE_MODES": "pipeline.core.schema",
        "COMPRESSIONS": "pipeline.core.schema",
        "shard_suffix": "pipeline.core.schema",
        "GzipSink": "transforms.write_shards",
    },
    "transforms.list_images": {"LISTING_REASONS": "pipeline.core.rejects"},
    "pipeline.progress": {
        n: "pipeline.core.tallies"
        for n in "PROGRESS_DIR_ENV STAGES tally flush read_counts".split()
    },
    "pipeline.shard_cache": {
        n: "pipeline.core.stores"
        for n in "_S3Store _TensorFlowStore _BeamStore _TF_SCHEMES _scheme _split_s3 _s3_store".split()
    },
    "transforms.inspect_images": {
        "decoder_error": "pipeline.core.rejects",
        "MAX_ERROR_DETAIL": "pipeline.core.rejects",
    },
    "pipeline.report": {
        n: "pipeline.report_scan"
        for n in "read_records parse_example scan_dataset class_histogram_lines SCAN_BYTES".split()
    },
}
PATHS = {
    old.replace(".", "/") + ".py": new.replace(".", "/") + ".py" for old, new in MODULES.items()
}
PATHS["transforms/image_check.py"] = "transforms/images/check.py"

_FROM = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<mod>[\w.]+) import (?P<names>\([^)]*\)|[^\n]*)", re.M
)


def _names(text: str) -> list[str]:
    text = text.strip().strip("()")
    text = re.sub(r"#[^\n]*", "", text)
    return [n.strip() for n in text.replace("\n", " ").split(",") if n.strip()]


def _emit(indent: str, groups: dict[str, list[str]], tail: str = "") -> str:
    lines = []
    for mod, names in groups.items():
        line = f"{indent}from {mod} import {', '.join(names)}"
        if len(line) > 100:
            inner = "".join(f"{indent}    {n},\n" for n in names)
            line = f"{indent}from {mod} import (\n{inner}{indent})"
        lines.append(line)
    if tail:
        lines[-1] += tail
    return "\n".join(lines)


def _rewrite_from(m: re.Match) -> str:
    indent, mod, raw = m["indent"], m["mod"], m["names"]
    tail = ""
    if not raw.startswith("(") and "#" in raw:
        raw, comment = raw.split("#", 1)
        tail = "  #" + comment
    names = _names(raw)
    groups: dict[str, list[str]] = {}
    if mod in ("pipeline", "transforms"):
        for n in names:
            base = n.split(" as ")[0]
            full = MODULES.get(f"{mod}.{base}", f"{mod}.{base}")
            if f"{mod}.{base}" == "transforms.image_check":
                return m.group(0)  # handled by _rewrite_module_alias
            parent, _, leaf = full.rpartition(".")
            groups.setdefault(parent, []).append(n.replace(base, leaf, 1) if leaf != base else n)
        return _emit(indent, groups, tail)
    if mod in NAMES:
        for n in names:
            base = n.split(" as ")[0]
            target = NAMES[mod].get(base, MODULES.get(mod, mod))
            if _SELF and target == _SELF:
                continue  # the name moved into this very module
            groups.setdefault(target, []).append(n)
        return _emit(indent, groups, tail) if groups else ""

    if mod in MODULES:
        return f"{indent}from {MODULES[mod]} import {m['names']}"
    return m.group(0)


def _bindings() -> dict[str, set[str]]:
    """name -> the transforms.images modules whose globals hold it (defined or from-imported
    there): where a monkeypatch must land for the code in that module to see it."""
    import ast
    import glob
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out: dict[str, set[str]] = {}
    for path in glob.glob(os.path.join(root, "transforms", "images", "*.py")):
        short = os.path.basename(path)[:-3]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_IMAGES):
                for a in node.names:
                    out.setdefault(a.asname or a.name, set()).add(_IMAGES + short)
    for name, new in NAMES["transforms.image_check"].items():
        out.setdefault(name, set()).add(new)
    return out


def _rewrite_module_alias(text: str, path: str) -> str:
    """`from transforms import image_check [as X]` (alone or among other names) + `X.NAME` and
    `monkeypatch.setattr(X, "NAME", v)` -> the new modules."""
    pat = re.compile(r"^([ \t]*)from transforms import ([\w ,]*\bimage_check\b[\w ,]*)$", re.M)
    bindings = None
    for m in list(pat.finditer(text)):
        names = [n.strip() for n in m.group(2).split(",") if n.strip()]
        mine = [n for n in names if n.split(" as ")[0] == "image_check"][0]
        alias = mine.split(" as ")[1] if " as " in mine else "image_check"
        used: dict[str, str] = {}
        bindings = bindings or _bindings()

        def patch(a: re.Match, used: dict = used, alias: str = alias, where_is=bindings) -> str:
            indent, obj, name, value = a.groups()
            where = sorted(where_is.get(name, ()))
            if not where:
                print(f"{path}: {alias}.{name}: not mapped", file=sys.stderr)
                return a.group(0)
            for new in where:
                used[new] = new.rpartition(".")[2]
            return "\n".join(f'{indent}{obj}.setattr({used[w]}, "{name}", {value})' for w in where)

        text = re.sub(
            rf'^([ \t]*)(\w+)\.setattr\(\s*{alias},\s*"(\w+)",\s*(.+)\)[ \t]*$',
            patch,
            text,
            flags=re.M,
        )

        def attr(a: re.Match, alias: str = alias, used: dict = used) -> str:
            name = a.group(1)
            new = NAMES["transforms.image_check"].get(name)
            if name == "importlib":  # CheckOptions looks up importlib.util.find_spec
                new = _IMAGES + "limits"
            if new is None:
                print(f"{path}: {alias}.{name}: not mapped", file=sys.stderr)
                return a.group(0)
            used[new] = new.rpartition(".")[2]
            return f"{used[new]}.{name}"

        text = re.sub(rf"(?<![\w.]){alias}\.(\w+)", attr, text)
        groups: dict[str, list[str]] = {}
        for new, short in sorted(used.items()):
            groups.setdefault(new.rpartition(".")[0], []).append(short)
        rest = [n for n in names if n is not mine]
        lines = [f"{m.group(1)}from transforms import {', '.join(rest)}"] if rest else []
        if groups:
            lines.append(_emit(m.group(1), groups))
        text = text.replace(m.group(0), "\n".join(lines), 1)
    return text


_SELF = ""  # the dotted name of the module being rewritten


def rewrite(text: str, path: str = "") -> str:
    global _SELF
    _SELF = path[2:] if path.startswith("./") else path
    _SELF = _SELF[:-3].replace("/", ".") if _SELF.endswith(".py") else ""
    text = _rewrite_module_alias(text, path)
    text = _FROM.sub(_rewrite_from, text)
    text = re.sub(
        r"^([ \t]*)import (pipeline\.\w+|transforms\.\w+)\b",
        lambda m: f"{m.group(1)}import {MODULES.get(m.group(2), m.group(2))}",
        text,
        flags=re.M,
    )
    for old, new in MODULES.items():  # dotted names elsewhere: -m targets, mock paths, docs
        text = re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w])", new, text)
    for old, new in PATHS.items():
        text = re.sub(rf"(?<![\w/]){re.escape(old)}", new, text)
    return text


if __name__ == "__main__":
    for name in sys.argv[1:]:
        with open(name, encoding="utf-8") as f:
            before = f.read()
        after = rewrite(before, name)
        if after != before:
            with open(name, "w", encoding="utf-8") as f:
                f.write(after)
            print(f"rewrote {name}")
