"""The Ray sink's scratch directories (object-store collections) never outlive their writer by
more than the next write on the host: a writer's directory is kept while its process lives
(it holds the lock), and removed once the process is gone, SIGKILL included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from zrecord import ray as zray



def _writer_process(parent: str, part_id: str) -> subprocess.Popen[bytes]:
    """A process that takes a scratch directory under ``parent``, fills it, says so on stdout
    and waits to be killed."""
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from zrecord import ray as zray
        s = zray._Scratch({parent!r}, {part_id!r})
        with open(os.path.join(s.dir, "chunk"), "wb") as f:
            f.write(b"x" * 4096)
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == b"ready"
    return p


def test_a_killed_writers_scratch_is_removed_and_a_live_ones_kept(tmp_path):
    parent = zray.scratch_parent("s3://bucket/coll", str(tmp_path))
    live = _writer_process(parent, "000001-live")
    dead = _writer_process(parent, "000002-dead")
    try:
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait()
        assert sorted(os.listdir(parent)) == [
            "000001-live", "000001-live.lock", "000002-dead", "000002-dead.lock"]
        removed = zray.clean_scratch(parent)
        assert removed == ["000002-dead"]
        assert sorted(os.listdir(parent)) == ["000001-live", "000001-live.lock"]
        # The live writer's directory stays however old it is.
        old = time.time() - 10 * zray.SCRATCH_GRACE_SECONDS
        os.utime(os.path.join(parent, "000001-live"), (old, old))
        assert zray.clean_scratch(parent) == []
        assert os.path.isfile(os.path.join(parent, "000001-live", "chunk"))
    finally:
        live.kill()
        live.wait()
    # Once its writer is gone, it goes too.
    assert zray.clean_scratch(parent) == ["000001-live"]
    assert os.listdir(parent) == []


def test_a_scratch_closed_by_its_writer_leaves_nothing(tmp_path):
    parent = zray.scratch_parent("s3://bucket/coll", str(tmp_path))
    s = zray._Scratch(parent, "000003-x")
    # Held in this process: another cleaner (another open file) sees it locked.
    assert zray.clean_scratch(parent) == []
    s.close()
    assert os.listdir(parent) == []


def test_leftovers_without_a_lock_go_once_old(tmp_path):
    parent = zray.scratch_parent("gs://b/c", str(tmp_path))
    os.makedirs(os.path.join(parent, "000004-nolock"))
    open(os.path.join(parent, "000005-x.lock.123.tmp"), "w").close()
    assert zray.clean_scratch(parent) == []
    old = time.time() - 2 * zray.SCRATCH_GRACE_SECONDS
    for name in os.listdir(parent):
        os.utime(os.path.join(parent, name), (old, old))
    assert zray.clean_scratch(parent) == ["000004-nolock", "000005-x.lock.123.tmp"]
    assert os.listdir(parent) == []


def test_collections_have_separate_scratch_parents(tmp_path):
    a = zray.scratch_parent("s3://bucket/a", str(tmp_path))
    b = zray.scratch_parent("s3://bucket/b", str(tmp_path))
    assert a != b
    assert a == zray.scratch_parent("s3://bucket/a/", str(tmp_path))
    assert os.path.dirname(a) == os.path.join(str(tmp_path), zray.SCRATCH_DIR)
