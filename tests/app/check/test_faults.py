"""Commands under faults: `posenc port` killed (SIGKILL) at random points, a full disk, a read-only target
directory, a source rewritten while it is read, two ports to one target at once; `posenc check` with a backend
worker that dies or hangs.

The promise (docs/api.md §11, docs/reliability.md): one message and exit 2 (bad input, cannot write) or 1 (a
check failed); never a traceback, a hang, a half-written or corrupted TARGET, a changed SOURCE, or a
temporary file that outlives the next run. Each scenario runs the real command in a subprocess.
`POSENC_FAULT_KILLS=N` raises the number of random kills (default 12, about 20 s).
"""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from posenc.formats import open_reader

KILLS = int(os.environ.get("POSENC_FAULT_KILLS", 12))
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONFAULTHANDLER": ""}


def _source(path, n=8, rows=512):
    """A 16 MiB safetensors SOURCE (writing and verifying its port takes ~0.5 s of a ~1.4 s run)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    state = {f"w{i}": rng.standard_normal((rows, 1024)).astype(np.float32) for i in range(n)}
    save_file(state, str(path))
    return state


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _leftovers(directory):
    return sorted(n for n in os.listdir(directory) if n.startswith(".posenc-"))


def _port(*argv, preexec_fn=None):
    return subprocess.Popen([sys.executable, "-m", "posenc", "port", *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=preexec_fn)


def _assert_one_message(err, out=""):
    assert "Traceback" not in err + out, err
    assert len([line for line in err.strip().splitlines() if line.strip()]) == 1, err


def _assert_complete(target, state):
    """TARGET holds every SOURCE tensor, bit for bit."""
    reader = open_reader(str(target))
    assert sorted(reader.names()) == sorted(state)
    for name, value in state.items():
        np.testing.assert_array_equal(np.asarray(reader.get(name)), value)


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".weights.h5", "/"])
def test_port_killed_at_random_points_leaves_nothing_half_written(tmp_path, suffix):
    src = tmp_path / "src.safetensors"
    state = _source(src)
    digest = _sha(src)
    target = str(tmp_path / "out") + ("" if suffix == "/" else suffix) + ("/" if suffix == "/" else "")
    rename = ["--rename", "w*=w*"] if suffix == ".weights.h5" else []
    started = time.perf_counter()
    proc = _port(src, target, *rename)
    out, err = proc.communicate(timeout=120)
    duration = time.perf_counter() - started
    assert proc.returncode == 0, err
    _assert_complete(target, state)
    import shutil

    shutil.rmtree(target) if suffix == "/" else os.unlink(target)
    rng = np.random.default_rng(abs(hash(suffix)) % 2**32)
    outcomes = {"absent": 0, "complete": 0, "finished": 0}
    for _ in range(max(1, KILLS // 4)):
        proc = _port(src, target, *rename)
        time.sleep(float(rng.uniform(0.3, 1.0) * duration))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        if proc.returncode == 0:
            outcomes["finished"] += 1
        if os.path.exists(target.rstrip("/")):
            _assert_complete(target, state)  # complete and equal to SOURCE, or absent
            outcomes["complete"] += 1
            shutil.rmtree(target) if suffix == "/" else os.unlink(target)
        else:
            outcomes["absent"] += 1
        assert not os.path.exists(target.rstrip("/") + ".unverified")
        assert _sha(src) == digest  # SOURCE byte for byte unchanged
    # the next run completes and removes what the killed runs left (their processes are gone)
    proc = _port(src, target, *rename)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    _assert_complete(target, state)
    assert _leftovers(tmp_path) == [], _leftovers(tmp_path)
    assert _sha(src) == digest
    print(f"{suffix}: {outcomes}")


def _limit_file_size(limit):
    def preexec():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".weights.h5", ".msgpack", ".pt", "/"])
def test_port_to_a_full_disk_exits_2_with_one_message(tmp_path, suffix):
    src = tmp_path / "src.safetensors"
    _source(src, n=4, rows=256)  # 4 MiB
    digest = _sha(src)
    target = str(tmp_path / "out") + suffix
    rename = ["--rename", "w*=w*"] if suffix in (".weights.h5", ".msgpack") else []
    proc = _port(src, target, *rename, preexec_fn=_limit_file_size(1 << 20))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (proc.returncode, err)
    _assert_one_message(err, out)
    assert "cannot write" in err
    assert not os.path.exists(target.rstrip("/")) and _leftovers(tmp_path) == []
    assert _sha(src) == digest


def _read_only_directory(tmp_path):
    """A directory this process cannot write: chmod 0555 for a normal user; as root (which ignores
    permissions) a read-only mounted file system, if the machine has one."""
    if os.geteuid() != 0:
        directory = tmp_path / "ro"
        directory.mkdir()
        directory.chmod(0o555)
        return str(directory)
    for candidate in ("/sys", "/proc/sys", "/usr"):
        try:
            if os.statvfs(candidate).f_flag & os.ST_RDONLY:
                return candidate
        except OSError:
            continue
    pytest.skip("running as root, which ignores directory permissions, and no read-only file system is mounted")


def test_port_into_a_read_only_directory_exits_2(tmp_path):
    src = tmp_path / "src.safetensors"
    _source(src, n=1, rows=16)
    directory = _read_only_directory(tmp_path)
    target = os.path.join(directory, "posenc-fault-test.safetensors")
    proc = _port(src, target)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    _assert_one_message(err, out)
    assert "cannot write" in err and not os.path.exists(target)


@pytest.mark.parametrize("how", ["rewrite"])
def test_source_changed_while_being_read(tmp_path, how):
    """Bytes of SOURCE overwritten in place while the port runs: exit 0 only with a TARGET equal to the whole
    original SOURCE (read before the change), else exit 1 (verification against the changed SOURCE failed)
    or 2, with one message; never a crash. Truncation: `test_source_truncated_after_its_header_was_read`."""
    src = tmp_path / "src.safetensors"
    state = _source(src)
    size = os.path.getsize(src)
    target = tmp_path / "out.safetensors"
    results = []
    for delay in (0.4, 0.7, 0.9, 1.1):
        _source(src)
        proc = _port(src, target)
        time.sleep(delay)
        with open(src, "r+b") as handle:
            if how == "rewrite":
                handle.seek(size // 2)
                handle.write(np.full(size // 4, 7, np.uint8).tobytes())
            else:
                handle.truncate(size // 3)
        out, err = proc.communicate(timeout=120)
        results.append(proc.returncode)
        assert proc.returncode in (0, 1, 2), (proc.returncode, err)
        assert "Traceback" not in err + out, err
        if proc.returncode == 0:  # verified: TARGET equals one whole version of SOURCE, before or after
            changed = {k: np.asarray(v) for k, v in ((n, open_reader(str(src)).get(n)) for n in state)}
            try:
                _assert_complete(target, state)
            except AssertionError:
                _assert_complete(target, changed)
            os.unlink(target)
        elif proc.returncode == 2:
            _assert_one_message(err)
        else:  # 1: the verification report names the failed checks; TARGET kept aside as .unverified
            assert not target.exists()
        for leftover in (target, str(target) + ".unverified"):
            if os.path.exists(leftover):
                os.unlink(leftover)
    assert _leftovers(tmp_path) == []
    print(f"{how}: exit codes {results}")


def test_source_truncated_after_its_header_was_read(tmp_path):
    """A truncated SOURCE must not be memory-mapped past its end (SIGBUS kills the process, exit -7, as the
    first version of this test found): the reader checks the size before mapping each tensor."""
    from posenc.errors import UsageError

    src = tmp_path / "src.safetensors"
    state = _source(src, n=2, rows=64)
    reader = open_reader(str(src))
    np.testing.assert_array_equal(np.asarray(reader.get("w0")), state["w0"])
    with open(src, "r+b") as handle:
        handle.truncate(os.path.getsize(src) // 2)
    with pytest.raises(UsageError, match="changed while being read"):
        reader.get("w1")


def test_two_ports_to_one_target_at_once(tmp_path):
    src = tmp_path / "src.safetensors"
    state = _source(src)
    target = tmp_path / "out.safetensors"
    procs = [_port(src, target) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read(), p.stdout.read()) for p in procs]
    for rc, err, out in results:
        assert rc in (0, 2), err
        if rc == 2:
            _assert_one_message(err, out)
            assert "another posenc process is writing it now" in err
    assert any(rc == 0 for rc, _, _ in results)
    _assert_complete(target, state)
    assert _leftovers(tmp_path) == []


def test_port_while_another_process_holds_the_target_exits_2(tmp_path):
    """The deterministic half of the race above: the lock is held (by this test) for the whole run."""
    from posenc.io import target_lock

    src = tmp_path / "src.safetensors"
    _source(src, n=1, rows=16)
    target = tmp_path / "out.safetensors"
    with target_lock(target, what="TARGET"):
        proc = _port(src, target)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    _assert_one_message(err, out)
    assert "another posenc process is writing it now" in err and not target.exists()
    assert _leftovers(tmp_path) == []


def test_stale_temporaries_of_dead_processes_are_removed_live_ones_kept(tmp_path):
    from posenc.io import remove_stale_temporaries

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f".posenc-{dead.pid}-abc.tmp.safetensors").write_bytes(b"partial")
    (tmp_path / f".posenc-port-{dead.pid}-xyz").mkdir()
    live = tmp_path / f".posenc-{os.getppid()}-def.tmp.npz"
    live.write_bytes(b"in progress")
    removed = remove_stale_temporaries(tmp_path)
    assert len(removed) == 2 and _leftovers(tmp_path) == [live.name]


# --- posenc check with a worker process that dies or hangs ---------------------------------------------

def _check(*argv, fault, timeout=120):
    env = {**ENV, "POSENC_TEST_WORKER_FAULT": fault}
    return subprocess.run([sys.executable, "-m", "posenc", "check", "--encoding", "sinusoidal", "--dtype", "float32",
                           "--mode", "eager", "-q", *argv], capture_output=True, text=True, env=env, timeout=timeout)


def test_check_reports_a_crashed_worker_as_that_backend_failing():
    """torch runs; the tf worker is SIGKILLed and the jax worker raises: exit 1, each failure named, no
    BrokenProcessPool traceback, torch's comparisons reported as passed."""
    result = _check("--backend", "torch,tf,jax", "--jobs", "3", fault="tf:kill,jax:raise")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr and "BrokenProcessPool" not in result.stderr
    assert "worker process for backends tf was killed by SIGKILL" in result.stdout
    assert "worker process for backends jax failed: RuntimeError" in result.stdout
    assert " torch " in result.stdout.split("PASSED", 1)[1]


def test_check_stops_a_hung_worker_at_the_timeout():
    started = time.perf_counter()
    result = _check("--backend", "tf,jax", "--jobs", "2", "--timeout", "4", fault="tf:hang,jax:exit")
    assert time.perf_counter() - started < 60
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "worker process for backends tf timed out after 4 s" in result.stdout
    assert "worker process for backends jax exited with status 70" in result.stdout
