"""The scenario of tests/e2e/test_version_leases*.py: a training process on a versioned root while
scheduled runs rerun and prune it (readers are real processes: their exit removes the lease, their
kill -9 does not)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from core import leases, schema, versions
from pipeline.demo import build_corpus
from tests.runs import ROOT, cli, in_process, ok, tf_script
from tests.servers import wait_until

# A training job on the root: reads LATEST's version in a loop, writes its batch count to a file,
# stops when a file named like it plus ".stop" appears (a normal exit: the lease goes).
_TRAINER = """
import os, sys, time
from core import leases
leases.DEFAULT_TTL_S = float(sys.argv[3])
from pipeline.reader import make_dataset
root, progress = sys.argv[1], sys.argv[2]
ds = make_dataset(root, "train", global_batch_size=2, training=True, image_size=(32, 32), seed=1)
n = 0
for _ in ds:
    n += 1
    with open(progress + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(progress + ".tmp", progress)
    if os.path.exists(progress + ".stop"):
        break
    # A training step: five a second keep this process off the shared cores (the scenario
    # waits for 5 batches at most; three readers run at once, one per store, for minutes).
    time.sleep(0.2)
print("read", n, "batches")
"""
_STARTUP_S = 180  # a fresh TensorFlow import and the first batch on a loaded 2-core box
# The time to live of the lease of the reader killed with SIGKILL (the test waits for its expiry;
# it was 45 s): 10 s at least between the kill and the expiry for the next run to see it held.
KILLED_TTL_S = 15.0
_ARGS = ["--no_analyze", "--target_shard_mb", "0.01", "--workers", "1", "--no_report"]


@dataclasses.dataclass
class Place:
    """Where the versioned root lives, and how to look at it without imgrec."""

    root: str
    beam_args: list[str]
    env: dict[str, str]
    store: object | None = None  # tests.servers store for buckets
    # TensorFlow's GCS uploads do not get through the test's googleapis.com front (reads do:
    # "Could not resolve host: www.googleapis.com" on the upload), so on gs:// the reader's lease
    # write fails, which it says once and reads on (checked), and the test writes the same
    # lease object for it, removing it when the reader exits, as the reader would.
    stand_in_leases: bool = False

    def names(self) -> list[str]:
        """Version folders that hold a dataset_info.json."""
        if self.store is None:
            return sorted(
                n
                for n in os.listdir(self.root)
                if versions.is_version_name(n)
                and os.path.exists(os.path.join(self.root, n, schema.DATASET_INFO))
            )
        bucket, _, prefix = self.root.partition("://")[2].partition("/")
        keys = self.store.keys(bucket, prefix + "/")
        return sorted({k.split("/")[-2] for k in keys if k.endswith("/" + schema.DATASET_INFO)})

    def lease_files(self, name: str) -> list[str]:
        if self.store is None:
            folder = leases.lease_folder(os.path.join(self.root, name))
            return sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        bucket, _, prefix = self.root.partition("://")[2].partition("/")
        keys = self.store.keys(bucket, f"{prefix}/{name}/{leases.LEASE_FOLDER}/")
        return [k.rpartition("/")[2] for k in keys if k.endswith(".json")]

    def latest(self) -> str:
        return versions.read_latest(self.root)

    def put_stand_in_lease(self, name: str, pid: int, ttl_s: float) -> str | None:
        """The lease the reader `pid` would write on version `name`; its URI (None locally)."""
        if not self.stand_in_leases:
            return None
        now = time.time()
        body = {"host": "trainer", "pid": pid, "acquired_unix": now, "expires_unix": now + ttl_s}
        uri = f"{self.root}/{name}/{leases.LEASE_FOLDER}/trainer-{pid}-stand-in.json"
        self.store.put(uri, json.dumps(body).encode())
        return uri

    def remove_stand_in_lease(self, uri: str | None) -> None:
        if uri is not None:
            from apache_beam.io.filesystems import FileSystems

            FileSystems.delete([uri])


def convert(place: Place, src: Path, *extra: str):
    return in_process(
        "convert", "--input", f"{src}/**", "--output", place.root, "--versioned",
        *_ARGS, *place.beam_args, *extra,
    )  # fmt: skip


def _start_trainer(place: Place, work: Path, tag: str, ttl_s: float) -> tuple:
    progress = work / f"progress-{tag}"
    log = open(work / f"trainer-{tag}.log", "w")  # noqa: SIM115 - closed by the caller's wait
    proc = subprocess.Popen(
        tf_script(_TRAINER, place.root, str(progress), str(ttl_s)),
        cwd=ROOT,
        env=place.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    started = wait_until(lambda: progress.exists() or proc.poll() is not None, _STARTUP_S, 0.2)
    assert started and proc.poll() is None, (work / f"trainer-{tag}.log").read_text()[-3000:]
    return proc, progress, log


def _batches(progress: Path) -> int:
    return int(progress.read_text() or 0)


def scenario(place: Place, work: Path, src: Path, *, kill: bool = False) -> None:
    """Two pruning runs under a training reader, the run after it exits; with `kill`, a reader
    killed with SIGKILL whose lease holds its version until it expires (the lease rules are the
    store's own reads and writes, the same on every store: checked on local disk only, where the
    wait for the expiry costs least)."""
    v1 = place.latest()
    trainer, progress, log = _start_trainer(place, work, "a", 600)
    stand_in = place.put_stand_in_lease(v1, trainer.pid, 600)
    try:
        assert len(place.lease_files(v1)) == 1, (work / "trainer-a.log").read_text()[-3000:]
        # Two scheduled runs that prune to one version: a no-change rerun (made from v1 without
        # the pipeline), then one with a new file (the pipeline).
        second = ok(convert(place, src, "--keep_versions", "1", "--keep_for", "0"))
        v2 = place.latest()
        assert f"kept        {v1}: held by 1 reader(s)" in second.stdout
        assert place.names() == [v1, v2]
        assert place.lease_files(v2) == []  # v1's lease is not carried into the copy
        shutil.copy(sorted(src.rglob("*.jpg"))[0], src / "cat" / "added-later.jpg")
        before = _batches(progress)
        third = ok(convert(place, src, "--keep_versions", "1", "--keep_for", "0"))
        v3 = place.latest()
        assert "changes: +1 added" in third.stdout
        assert place.names() == [v1, v3], "v2 pruned, v1 held"
        # The job kept reading v1 through both runs.
        assert wait_until(lambda: _batches(progress) > before + 5, 60, 0.2)
        assert trainer.poll() is None
        (work / "progress-a.stop").write_text("")
        assert trainer.wait(120) == 0, (work / "trainer-a.log").read_text()[-3000:]
        place.remove_stand_in_lease(stand_in)
        if place.stand_in_leases:
            said = (work / "trainer-a.log").read_text().count("cannot write the lease")
            assert said == 1, "a refused lease write is said once, and reading goes on"
    finally:
        if trainer.poll() is None:
            trainer.kill()
        log.close()
    assert place.lease_files(v1) == [], "the lease goes when the reader exits"
    ok(convert(place, src, "--keep_versions", "1", "--keep_for", "0"))
    v4 = place.latest()
    assert place.names() == [v4], "the next run prunes v1 once its reader is gone"
    if not kill:
        return

    # A reader killed with SIGKILL leaves its lease behind: it holds v4 until it expires. The
    # reader renews its lease every third of its time to live, so the lease outlives the kill by
    # 2/3 of KILLED_TTL_S at least: the next run (a no-change rerun, under a second here) must
    # list it in that time; then the test sleeps until the lease's own expiry, no longer.
    killed, _, log = _start_trainer(place, work, "b", KILLED_TTL_S)
    place.put_stand_in_lease(v4, killed.pid, KILLED_TTL_S)
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    log.close()
    assert len(place.lease_files(v4)) == 1
    version_dir = versions._join(place.root, v4)  # noqa: SLF001 - the root's own join
    expires = max(float(x["expires_unix"]) for x in leases.live_leases(version_dir))
    fifth = ok(convert(place, src, "--keep_versions", "1", "--keep_for", "0"))
    v5 = place.latest()
    late = "" if time.time() < expires else " (the run ended after the lease expired: too slow?)"
    assert f"kept        {v4}: held by 1 reader(s)" in fifth.stdout, fifth.stdout + late
    assert place.names() == [v4, v5]
    time.sleep(max(0.0, expires - time.time()) + 0.05)
    assert not leases.live_leases(version_dir), "a lease stops counting at its expires_unix"
    ok(convert(place, src, "--keep_versions", "1", "--keep_for", "0"))
    assert place.names() == [place.latest()], "an expired lease holds nothing"


def build_source(tmp_path: Path) -> Path:
    """24 demo photos in two classes."""
    src = tmp_path / "photos"
    build_corpus(str(src), num_images=24, broken=False)
    return src
