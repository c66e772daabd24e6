"""The machine-state record and the refusal rule of the GRPO step benchmark
(``bench/grpo_step/machine.py``), on fabricated ``/proc`` text: nothing here depends on this machine's
state."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.grpo_step.machine import (  # noqa: E402
    busy_reasons,
    cpu_ticks,
    describe,
    machine_state,
    other_cpu_s,
    own_tree,
    parse_meminfo,
    read_state,
    refusal,
)

GIB = 1024 * 1024  # kB

MEMINFO = f"MemTotal:       {24 * GIB} kB\nMemFree:        {2 * GIB} kB\nMemAvailable:   {20 * GIB} kB\n"


def status(pid: int, ppid: int, name: str, rss_kb: int | None) -> str:
    rss = f"VmRSS:\t{rss_kb} kB\n" if rss_kb is not None else ""
    return f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t{pid}\nPPid:\t{ppid}\n{rss}Threads:\t1\n"


# the bench (100) with a measuring child (101) and grandchild (102); another job (200) and its worker (201);
# init and a kernel thread without VmRSS
PROCESSES = [
    status(1, 0, "init", 10 * 1024),
    status(2, 0, "kthreadd", None),
    status(100, 1, "python", 500 * 1024),
    status(101, 100, "python", 3 * GIB),
    status(102, 101, "python", 1 * GIB),
    status(200, 1, "train.py", 6 * GIB),
    status(201, 200, "worker", 1 * GIB),
]


def test_meminfo_is_read_in_mib():
    assert parse_meminfo(MEMINFO) == {"mem_total_mib": 24 * 1024, "mem_available_mib": 20 * 1024}


def test_the_bench_tree_is_left_out_and_the_others_are_ranked_by_rss():
    from bench.grpo_step.machine import parse_status

    assert own_tree([parse_status(s) for s in PROCESSES], 100) == {100, 101, 102}
    state = machine_state("2.50 1.86 1.55 5/115 7766", MEMINFO, PROCESSES, own_pid=100, top=2)
    assert state["load"] == [2.5, 1.86, 1.55]
    assert state["others_rss_mib"] == 6 * 1024 + 1024 + 10  # train.py, worker, init; not the bench, not kthreadd
    assert state["top_others"] == [{"pid": 200, "name": "train.py", "rss_mib": 6144.0},
                                   {"pid": 201, "name": "worker", "rss_mib": 1024.0}]


def test_read_state_reads_a_proc_tree(tmp_path):
    (tmp_path / "loadavg").write_text("0.10 0.20 0.30 1/100 42\n")
    (tmp_path / "meminfo").write_text(MEMINFO)
    for text in PROCESSES:
        pid = text.split("Pid:\t")[1].split()[0]
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "status").write_text(text)
    (tmp_path / "self").mkdir()  # not a process directory
    state = read_state(tmp_path, own_pid=200)  # as if the bench were the other job
    assert [p["pid"] for p in state["top_others"]] == [101, 102, 100, 1]
    assert state["mem_available_mib"] == 20 * 1024 and state["load"][0] == 0.1


def state(available_gib: float, others_gib: float = 0.0, load: float = 0.0) -> dict:
    return {"load": [load, 0.0, 0.0], "mem_total_mib": 24 * 1024.0, "mem_available_mib": available_gib * 1024,
            "others_rss_mib": others_gib * 1024, "top_others": [{"pid": 200, "name": "train.py",
                                                                 "rss_mib": others_gib * 1024}]}


def test_an_idle_machine_with_room_for_the_trainers_passes():
    assert busy_reasons(state(20), need_mib=16 * 1024, threads=2, cpus=2) == []


def test_memory_the_trainers_need_held_by_another_process_refuses_and_names_it():
    # 16.5 GiB available, the trainers peak at 16 GiB: 0.5 GiB left, under the 1.2 GiB margin (5% of 24 GiB)
    reasons = busy_reasons(state(16.5, others_gib=4), need_mib=16 * 1024, threads=2, cpus=2)
    assert len(reasons) == 1
    assert "MemAvailable 16896 MiB leaves 512 MiB" in reasons[0] and "margin of 1229 MiB" in reasons[0]
    assert "train.py (pid 200) 4096 MiB" in reasons[0]
    # the same machine has room for a small workload
    assert busy_reasons(state(16.5, others_gib=4), need_mib=1024, threads=2, cpus=2) == []


def test_a_large_resident_job_refuses_even_when_the_trainers_fit():
    reasons = busy_reasons(state(20, others_gib=6.5), need_mib=1024, threads=2, cpus=2)
    assert len(reasons) == 1 and "other processes hold 6656 MiB resident, over 6144 MiB" in reasons[0]
    assert busy_reasons(state(20, others_gib=6.5), need_mib=1024, threads=2, cpus=2, max_other_mib=8192) == []


def test_the_load_bound_is_the_cores_the_bench_leaves_free_and_is_checked_only_when_asked():
    assert busy_reasons(state(20, load=0.4), 1024, threads=2, cpus=2) == []
    reasons = busy_reasons(state(20, load=0.6), 1024, threads=2, cpus=2)
    assert len(reasons) == 1 and "1-minute load average 0.60 over 0.50" in reasons[0]
    assert busy_reasons(state(20, load=0.6), 1024, threads=2, cpus=2, check_load=False) == []
    assert busy_reasons(state(20, load=10.0), 1024, threads=2, cpus=16) == []  # 14.5 on 16 cores


def test_cpu_taken_by_other_processes_during_a_measurement():
    stat = {7: "7 (a (weird) name) S 1 7 7 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 5 1000 10",
            8: "8 (x) S 1 8 8 0 -1 0 0 0 0 0 10 0 0 0 20 0 1 0 5 1000 10"}
    assert cpu_ticks(stat) == {7: 300, 8: 10}
    before, after = {7: 300, 8: 10, 9: 5}, {7: 400, 8: 10, 10: 50, 100: 9000}  # 9 ended, 10 started; 100 is ours
    assert other_cpu_s(before, after, ours={100}, hz=100) == pytest.approx(1.5)
    assert busy_reasons(state(20), 1024, 2, 2, other_cpu=1.5, wall_s=100) == []  # 0.015 of a core
    reasons = busy_reasons(state(20), 1024, 2, 2, other_cpu=30, wall_s=100)
    assert len(reasons) == 1 and "0.30 of a core" in reasons[0]


def test_the_refusal_says_how_to_override_and_old_reports_say_not_recorded():
    text = refusal(["1-minute load average 2.50 over 0.50"], "write into docs/performance.md")
    assert "refusing to write into docs/performance.md" in text and "--allow-busy" in text and "2.50" in text
    assert describe(None) == "not recorded"
    assert describe(state(20, others_gib=2, load=0.25)).startswith("load 0.25/0.00/0.00, MemAvailable 20.0 of 24.0 GiB")


def test_the_cpu_flags_and_name_are_read_from_cpuinfo():
    from bench.grpo_step.machine import cpu_flags, cpu_name

    info = ("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n\n"
            "processor\t: 1\n")
    assert cpu_flags(info) == {"avx2": True, "avx512_bf16": True, "amx_bf16": False, "amx_tile": False}
    assert cpu_flags("") == {"avx2": False, "avx512_bf16": False, "amx_bf16": False, "amx_tile": False}
    assert cpu_name(info).startswith("AMD EPYC (")
