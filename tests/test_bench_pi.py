"""bench/pi.py (`python -m bench --pi`): its pure parts only; nothing here runs or times the benchmark."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from bench import pi

V1_MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
V2_MOUNTS = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"


def _v1_tree(root: Path) -> Path:
    memory = root / "sys/fs/cgroup/memory"
    memory.mkdir(parents=True)
    (memory / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    unified = root / "sys/fs/cgroup/unified"  # hybrid: v2 without the memory controller
    unified.mkdir(parents=True)
    (unified / "cgroup.controllers").write_text("hugetlb\n")
    return memory


def _v2_tree(root: Path, subtree: str) -> Path:
    top = root / "sys/fs/cgroup"
    top.mkdir(parents=True)
    (top / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (top / "cgroup.subtree_control").write_text(subtree + "\n")
    return top


def test_cgroup_v1_memory_is_chosen_in_a_hybrid_tree(tmp_path: Path) -> None:
    memory = _v1_tree(tmp_path)
    plan = pi.plan_memory_cgroup(V1_MOUNTS, tmp_path)
    assert plan == pi.CgroupPlan(1, memory, "memory.limit_in_bytes", "memory.max_usage_in_bytes")


def test_cgroup_v2_needs_memory_in_subtree_control(tmp_path: Path) -> None:
    top = _v2_tree(tmp_path, "cpu memory pids")
    assert pi.plan_memory_cgroup(V2_MOUNTS, tmp_path) == pi.CgroupPlan(2, top, "memory.max", "memory.peak")
    (top / "cgroup.subtree_control").write_text("cpu pids\n")
    reason = pi.plan_memory_cgroup(V2_MOUNTS, tmp_path)
    assert isinstance(reason, str)
    assert "subtree_control" in reason


def test_no_usable_cgroup_gives_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pi.plan_memory_cgroup("proc /proc proc rw 0 0\n", tmp_path) == "no cgroup filesystem is mounted"
    _v1_tree(tmp_path)
    monkeypatch.setattr(pi.os, "access", lambda *_a, **_k: False)  # as a non-root user sees it
    reason = pi.plan_memory_cgroup(V1_MOUNTS, tmp_path)
    assert isinstance(reason, str)
    assert "not writable" in reason
    assert "no memory controller" in reason  # and the v2 mount was looked at too


def test_memory_cgroup_writes_the_limit_and_reads_the_peak(tmp_path: Path) -> None:
    memory = _v1_tree(tmp_path)
    plan = pi.plan_memory_cgroup(V1_MOUNTS, tmp_path)
    assert isinstance(plan, pi.CgroupPlan)
    cgroup = pi.MemoryCgroup(plan, "hubd-bench-pi-test", 256)
    cgroup.create()
    assert (memory / "hubd-bench-pi-test" / "memory.limit_in_bytes").read_text() == str(256 * 1024 * 1024)
    assert cgroup.join_prefix()[-1] == str(memory / "hubd-bench-pi-test" / "cgroup.procs")
    assert cgroup.peak_mib() is None  # the kernel's file is missing here
    (cgroup.path / "memory.max_usage_in_bytes").write_text(str(80 * 1024 * 1024))
    (cgroup.path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert cgroup.peak_mib() == 80.0
    assert cgroup.oom_kills() == 2


def test_cores_and_busy_share() -> None:
    assert pi.split_cores({0, 1}) == (1, [0])
    assert pi.split_cores({0, 1, 2, 3}) == (3, [0, 1, 2])
    assert pi.split_cores({0}) == (0, [0])
    before = pi.cpu_times("cpu  9 9 9 9\ncpu0 10 0 10 80 0 0 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0 0 0\nintr 1\n")
    after = pi.cpu_times("cpu  9 9 9 9\ncpu0 60 0 20 120 0 0 0 0 0 0\ncpu1 90 0 0 110 0 0 0 0 0 0\n")
    assert before[0] == (20, 100)
    assert pi.busy_percent(before, after) == {0: 60.0, 1: 90.0}


def test_fs_type_takes_the_longest_mount_point(tmp_path: Path) -> None:
    mounts = f"/dev/vda / ext4 rw 0 0\ntmpfs {tmp_path} tmpfs rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\n"
    assert pi.fs_type(tmp_path / "x", mounts) == "tmpfs"
    assert pi.fs_type(Path("/usr"), mounts) == "ext4"


def test_params_quick_full_and_overrides() -> None:
    args = argparse.Namespace(quick=False, devices=None, events=None, rates=None, latency_seconds=None,
                              synchronous="full")
    full = pi.pi_params(args)
    assert (full.devices, full.events, full.rates, full.latency_s) == (1000, 20_000, (100.0, 1000.0), 10.0)
    args.quick, args.devices, args.rates = True, 50, "100"
    quick = pi.pi_params(args)
    assert (quick.devices, quick.events, quick.rates, quick.latency_s) == (50, 3_000, (100.0,), 3.0)


def _place(rate: float, p99: float, *, limited: bool) -> dict[str, Any]:
    place: dict[str, Any] = {
        "fs_type": "tmpfs", "calibration": {"python_loop_5m_s": 0.2, "sqlite_full_commit_ms": 0.01},
        "calibration_after": {"python_loop_5m_s": 0.2, "sqlite_full_commit_ms": 0.02},
        "ready_s": 0.9, "all_known_s": 1.1, "idle_rss_no_devices_mib": 60.0, "idle_rss_mib": 62.0,
        "peak_rss_mib": 70.0,
        "throughput": {"events": 20000, "received": 20000, "events_per_s": rate, "sustained_events_per_s": rate,
                       "cpu_s_per_1000": 0.3, "busy_percent": {"0": 80.0, "1": 99.0},
                       "hubd_cpu_percent": 97.0 if rate >= 1000 else 70.0},
        "latency.100": {"p50_ms": 1.5, "p99_ms": p99, "max_ms": 12.0},
    }
    if limited:
        place.update(memory_limit_mib=256, cgroup_peak_mib=55.5)
    return place


def test_markdown_table() -> None:
    results: dict[str, Any] = {
        "pi_core": 1, "other_cores": [0], "params": {"devices": 1000, "rates": [100.0]},
        "goals": {"events_per_s": 1000.0, "p99_ms": 10.0, "rate": 100.0},
        "calibration_before": {"python_loop_5m_s": 0.2, "sqlite_full_commit_ms": 0.2},
        "calibration_after": {"python_loop_5m_s": 0.3, "sqlite_full_commit_ms": 0.25},
        "memory_limit": {"applied": True, "cgroup": "v1", "limit_mib": 256},
        "places": {"tmpfs": _place(2500.0, 4.0, limited=True),
                   "disk": {**_place(900.0, 12.5, limited=False), "fs_type": "ext4"}},
        "skipped": {},
    }
    text = pi.markdown(results)
    assert "| metric | database on tmpfs (tmpfs) | database on disk (ext4) | goal |" in text
    assert "| throughput, events/s (first publish → last receipt) | 2,500 | 900 | ≥ 1,000 |" in text
    assert "| latency at 100/s, p99 ms | 4.0 | 12.5 | ≤ 10 |" in text
    assert "| cgroup memory peak (RSS + page cache + tmpfs), MiB | 55.5 | not limited | ≤ 256 |" in text
    assert "| memory limit | 256 MiB | not limited |  |" in text
    assert "| goals met: ≥ 1,000 events/s / p99 ≤ 10 ms at 100/s | yes / yes | NO / NO |  |" in text
    assert ("| during throughput: hubd's CPU / core 1 busy (all processes) / core 0 busy, % | 97 / 99 / 80 | "
            "70 / 99 / 80 |  |") in text
    assert "Throughput (disk): hubd used 70% of its core" in text
    assert "Throughput (tmpfs): hubd used" not in text
    assert "Throughput (disk): core 1 was 99% busy, 29 points of it not hubd" in text
    assert "1,000 devices: start → ready (/healthz 200), s | 0.90 | 0.90 |" in text
    assert "0.2 / 0.3 s" in text
    assert "| one SQLite commit, synchronous=FULL, ms (before / after this column's runs) | 0.010 / 0.020 |" in text

    results["memory_limit"] = {"applied": False, "reason": "cgroup v1 memory at /x is not writable (run as root)"}
    results["places"] = {"tmpfs": {"error": "RuntimeError: hubd exited with -9", "fs_type": "tmpfs"}}
    text = pi.markdown(results)
    assert "NO memory limit (cgroup v1 memory at /x is not writable (run as root))" in text
    assert "| error (tmpfs) | RuntimeError: hubd exited with -9 |" in text
    assert "| memory limit | not limited |  |" in text
