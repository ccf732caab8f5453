"""Sample a command with py-spy and summarise where its time goes (inclusive % per bucket, top self).

    python bench/profile.py --num_images 3000                 # profile `imgrec convert --workers 1`
    python bench/profile.py --num_images 3000 -- --workers 2  # extra convert flags after --
    python bench/profile.py --raw FILE                        # re-summarise a saved profile

py-spy is a dev tool, not a project dependency: `.venv/bin/pip install py-spy`.
Buckets are matched on the collapsed stack (file:function names), first match wins per sample in
the order listed, so "decode" is counted before the Beam frames that called it. Idle samples
(threads waiting) are dropped with --idle off, which is py-spy's default.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import WORK, corpus  # noqa: E402

# (bucket, substrings of a frame; any match) - checked leaf-most frame first, first bucket wins.
BUCKETS = [
    ("image decode (tf.io.decode_image)", ("decode_image", "decode_jpeg", "decode_png")),
    ("pixel stats (numpy)", ("_channel_stats",)),
    ("PIL header (Image.open)", ("PIL/",)),
    ("sha256", ("sha256", "hexdigest")),
    ("Example build", ("make_example", "_bytes_feature", "_int64_feature")),
    ("TFRecord write + crc", ("write_record", "HashingWriter", "_masked_crc32c")),
    ("file read (FileSystems)", ("read_bytes", "filesystems.py", "localfilesystem.py")),
    (
        "TF eager dispatch / tensor",
        (
            "tensorflow/python/eager",
            "tensorflow/python/framework",
            "tensorflow/python/ops",
            "tensorflow/python/util",
        ),
    ),
    ("imports (module load)", ("<frozen importlib", "_find_and_load")),
    ("coders / pickling", ("coder", "pickle", "dill", "cloudpickle")),
    (
        "Beam runner (FnApi/Direct, bundles, state)",
        ("apache_beam/runners", "apache_beam/transforms", "apache_beam/pipeline.py", "portability"),
    ),
    ("protobuf (other)", ("google/protobuf",)),
    ("grpc / threading", ("grpc", "threading.py", "concurrent/futures")),
]


# Leaf frames of a thread that is blocked, not working. py-spy's own idle detection does not
# work in this container (it reports blocked queue/condition waits as active), so drop them here.
WAITING = (
    "Condition.wait",
    "concurrent/futures/thread.py:81)",
    "grpc/_server.py",
    "grpc/_channel.py",
    "Event.wait",
    "queue.py",
    "selectors.py",
    "Thread.join",
    "_wait_for_tstate_lock",
    "lock.acquire",
    "_ModuleLock.acquire",
)


def summarise(raw_path: str, top: int = 25) -> str:
    """Bucket table + top self frames of a py-spy `--format raw` (collapsed stacks) file."""
    buckets = collections.Counter()
    self_frames = collections.Counter()
    inclusive = collections.Counter()
    total = idle = 0
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            frames = stack.split(";")
            if any(w in frames[-1] for w in WAITING):
                idle += n
                continue
            self_frames[frames[-1]] += n
            for fr in set(frames):
                inclusive[fr.split(" (")[0] if " (" in fr else fr] += n
            total += n
            for name, keys in BUCKETS:
                if any(k in fr for fr in frames for k in keys):
                    buckets[name] += n
                    break
            else:
                buckets["other"] += n
    lines = [
        f"{total} busy samples (all threads; {idle} blocked-thread samples dropped)",
        "",
        "| bucket | % of samples |",
        "|---|---|",
    ]
    for name, n in buckets.most_common():
        lines.append(f"| {name} | {100 * n / max(total, 1):.1f} |")
    lines += ["", "| top self frame | % |", "|---|---|"]
    for fr, n in self_frames.most_common(top):
        lines.append(f"| `{fr[:110]}` | {100 * n / max(total, 1):.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--num_images", type=int, default=300)
    ap.add_argument("--rate", type=int, default=50, help="samples per second")
    ap.add_argument(
        "--gil",
        action="store_true",
        help="sample only the thread holding the GIL (where Python time goes)",
    )
    ap.add_argument("--raw", default="", help="summarise this saved raw profile and exit")
    ap.add_argument(
        "--command", default="", help="profile this shell command instead of imgrec convert"
    )
    args = ap.parse_args(argv)
    if args.raw:
        print(summarise(args.raw))
        return 0
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        raise SystemExit("py-spy not found: .venv/bin/pip install py-spy (dev tool only)")
    raw = os.path.join(WORK, f"profile-{args.num_images}{'-gil' if args.gil else ''}.raw")
    if args.command:
        target = ["bash", "-c", args.command]
    else:
        cdir, _ = corpus(args.num_images)
        target = [
            sys.executable,
            "-m",
            "pipeline",
            "convert",
            "--input",
            f"{cdir}/*/*.jpg",
            "--output",
            os.path.join(WORK, f"out-profile-{args.num_images}"),
            "--overwrite",
            "--no_analyze",
            "--max_bad_fraction",
            "0.5",
        ] + (extra or ["--workers", "1"])
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    cmd = (
        [
            spy,
            "record",
            "--format",
            "raw",
            "--rate",
            str(args.rate),
            "--subprocesses",
            "--threads",
            "--output",
            raw,
        ]
        + (["--gil"] if args.gil else [])
        + ["--"]
        + target
    )
    print(" ".join(cmd), file=sys.stderr)
    rc = subprocess.call(cmd, env=env)
    if rc != 0:
        print(f"py-spy/command exited {rc}", file=sys.stderr)
    print(summarise(raw))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
