"""The machine's state around the benchmark's measurements, and the rule that refuses to publish them.

Recorded once at the start and the end of a run and before every measuring process: the load averages,
``MemAvailable`` and ``MemTotal`` (``/proc/meminfo``) and the resident set size (``VmRSS``) of the largest
processes outside the benchmark's own process tree (the bench and its children, from ``/proc/*/status``).

The rule (:func:`busy_reasons`), given ``need_mib``, the peak RSS of the largest trainer process the run
will start (the largest measured so far in this run, at least the workload's prior, ``run.NEED_MIB``):

1. **memory the trainers need**: ``MemAvailable - need_mib < margin_mib`` (default margin: 1 GiB or 5% of
   ``MemTotal``, whichever is larger). ``MemAvailable`` is what the kernel can hand out without swapping;
   when other processes hold so much that a trainer's peak would not fit with that margin, the trainer
   pages or the page cache it reads its model from is evicted, and its times measure the other process.
2. **another resident job**: the other processes' RSS together exceed ``max_other_mib`` (default 25% of
   ``MemTotal``): even when the trainers fit, a job that size competes for the memory bandwidth and the
   cores (the suspected cause of one TRL run at 71 s a step against 40-52 s in another).
3. **CPU taken during a measurement** (per measuring process): the processes outside the bench's tree used
   more than ``max_other_cpu`` (default 0.1) of one core on average over the process's wall time (CPU
   seconds from ``/proc/PID/stat`` before and after).
4. **load** (only before the run starts; between measuring processes the bench's own finished children
   still weigh on the 1-minute average): the 1-minute load average exceeds ``max_load``, by default the
   cores the bench leaves free, ``cpus - threads``, plus 0.5 (0.5 on 2 cores with 2 threads).

A run that writes results (``--write`` or ``--json``) checks rules 1, 2 and 4 before it measures anything
and stops with the reasons; around each measuring process it checks rules 1-3 and records any reasons with
that process; ``--write`` then refuses to put a report with recorded reasons into the docs (``--json``
still saves it, with the reasons). ``--allow-busy`` overrides both. Everything here but
:func:`read_state` is a pure function of the text of ``/proc`` files.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

TOP = 5  # other processes recorded, largest RSS first
#: The CPU flags a run records: native bf16 matmuls (``avx512_bf16``; AMX's tiles, ``amx_bf16``, ``amx_tile``)
#: and the AVX2 baseline; together they say whether the bf16 rows can run fast on this CPU
CPU_FLAGS = ("avx2", "avx512_bf16", "amx_bf16", "amx_tile")


def parse_meminfo(text: str) -> dict[str, float]:
    """``MemTotal`` and ``MemAvailable`` of a ``/proc/meminfo`` text, in MiB."""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if key in ("MemTotal", "MemAvailable") and parts:
            fields[key] = float(parts[0]) / 1024  # kB
    return {"mem_total_mib": fields.get("MemTotal", 0.0),
            "mem_available_mib": fields.get("MemAvailable", 0.0)}


def parse_status(text: str) -> dict:
    """``pid``, ``ppid``, ``name`` and ``rss_mib`` (0 for kernel threads, which have no ``VmRSS``) of a
    ``/proc/PID/status`` text."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    rss = fields.get("VmRSS", "0 kB").split()
    return {
        "pid": int(fields.get("Pid", "0")),
        "ppid": int(fields.get("PPid", "0")),
        "name": fields.get("Name", "?").strip(),
        "rss_mib": float(rss[0]) / 1024 if rss else 0.0,
    }


def own_tree(processes: list[dict], root: int) -> set[int]:
    """``root`` and every process descending from it."""
    children: dict[int, list[int]] = {}
    for p in processes:
        children.setdefault(p["ppid"], []).append(p["pid"])
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def machine_state(loadavg: str, meminfo: str, statuses: list[str], own_pid: int, top: int = TOP) -> dict:
    """The state recorded in the report: load averages (1, 5, 15 min), memory, the RSS of all other
    processes together and the ``top`` largest of them (``own_pid``'s tree excluded)."""
    processes = []
    for text in statuses:
        try:
            processes.append(parse_status(text))
        except (ValueError, IndexError):  # a process that vanished mid-read
            continue
    ours = own_tree(processes, own_pid)
    others = sorted((p for p in processes if p["pid"] not in ours and p["rss_mib"] > 0),
                    key=lambda p: -p["rss_mib"])
    return {
        "load": [float(x) for x in loadavg.split()[:3]],
        **parse_meminfo(meminfo),
        "others_rss_mib": sum(p["rss_mib"] for p in others),
        "top_others": [{"pid": p["pid"], "name": p["name"], "rss_mib": round(p["rss_mib"], 1)}
                       for p in others[:top]],
    }


def read_state(proc: Path = Path("/proc"), own_pid: int | None = None) -> dict:
    """:func:`machine_state` of this machine now (``proc``: the ``/proc`` to read), this process's tree
    excluded."""
    statuses = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                statuses.append((entry / "status").read_text())
            except OSError:  # gone, or not ours to read
                continue
    return machine_state((proc / "loadavg").read_text(), (proc / "meminfo").read_text(), statuses,
                         own_pid if own_pid is not None else os.getpid())


def cpu_ticks(stats: dict[int, str]) -> dict[int, int]:
    """User + system CPU time in clock ticks of each ``/proc/PID/stat`` text (``{pid: text}``)."""
    out = {}
    for pid, text in stats.items():
        fields = text[text.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
        try:
            out[pid] = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of the line
        except (IndexError, ValueError):
            continue
    return out


def other_cpu_s(before: dict[int, int], after: dict[int, int], ours: set[int], hz: float = 100.0) -> float:
    """CPU seconds the processes outside ``ours`` used between two :func:`cpu_ticks` snapshots (a process
    that started in between counts whole; one that ended in between is missed)."""
    return sum(t - before.get(pid, 0) for pid, t in after.items() if pid not in ours) / hz


def read_cpu() -> dict[int, int]:
    """:func:`cpu_ticks` of every process now."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text()
            except OSError:
                continue
    return cpu_ticks(stats)


def busy_reasons(state: dict, need_mib: float, threads: int, cpus: int, check_load: bool = True,
                 margin_mib: float | None = None, max_other_mib: float | None = None,
                 max_load: float | None = None, other_cpu: float | None = None, wall_s: float | None = None,
                 max_other_cpu: float = 0.1) -> list[str]:
    """Why ``state`` is no machine to publish measurements from (empty: it is), by the rule of this
    module's docstring; ``other_cpu`` seconds used by other processes over ``wall_s`` seconds of a
    measurement, when known."""
    total = state["mem_total_mib"]
    margin = margin_mib if margin_mib is not None else max(1024.0, 0.05 * total)
    max_other = max_other_mib if max_other_mib is not None else 0.25 * total
    bound = max_load if max_load is not None else max(cpus - threads, 0) + 0.5
    holders = ", ".join(f"{p['name']} (pid {p['pid']}) {p['rss_mib']:.0f} MiB" for p in state["top_others"])
    reasons = []
    left = state["mem_available_mib"] - need_mib
    if left < margin:
        reasons.append(
            f"MemAvailable {state['mem_available_mib']:.0f} MiB leaves {left:.0f} MiB after the trainers' "
            f"peak RSS of {need_mib:.0f} MiB, under the margin of {margin:.0f} MiB; largest other processes: "
            f"{holders or 'none'}")
    if state["others_rss_mib"] > max_other:
        reasons.append(
            f"other processes hold {state['others_rss_mib']:.0f} MiB resident, over {max_other:.0f} MiB "
            f"(25% of MemTotal by default); largest: {holders}")
    if other_cpu is not None and wall_s and other_cpu / wall_s > max_other_cpu:
        reasons.append(f"other processes used {other_cpu:.1f} CPU s during the {wall_s:.0f} s measurement "
                       f"({other_cpu / wall_s:.2f} of a core on average, over {max_other_cpu})")
    if check_load and state["load"][0] > bound:
        reasons.append(f"1-minute load average {state['load'][0]:.2f} over {bound:.2f} ({cpus} CPUs, "
                       f"{threads} threads for the bench)")
    return reasons


def refusal(reasons: list[str], what: str) -> str:
    """The error a refusing run stops with."""
    return (f"refusing to {what}: the machine is busy\n  - " + "\n  - ".join(reasons)
            + "\nStop those processes (or wait for the load to fall), or pass --allow-busy to measure and "
            "publish anyway; the report then records the state.")


def describe(state: dict | None) -> str:
    """One sentence of the report for a recorded state; ``not recorded`` for reports from before it was."""
    if not state:
        return "not recorded"
    others = ", ".join(f"{p['name']} {p['rss_mib'] / 1024:.1f} GiB" for p in state["top_others"][:3])
    return (f"load {'/'.join(f'{x:.2f}' for x in state['load'])}, MemAvailable "
            f"{state['mem_available_mib'] / 1024:.1f} of {state['mem_total_mib'] / 1024:.1f} GiB, other "
            f"processes {state['others_rss_mib'] / 1024:.1f} GiB resident"
            + (f" (largest: {others})" if others else ""))


def cpu_flags(cpuinfo: str, wanted: tuple[str, ...] = CPU_FLAGS) -> dict[str, bool]:
    """Which of ``wanted`` the first ``flags`` line of a ``/proc/cpuinfo`` text lists (all False without
    one)."""
    line = next((x for x in cpuinfo.splitlines() if x.startswith("flags")), "")
    have = set(line.partition(":")[2].split())
    return {flag: flag in have for flag in wanted}


def cpu_name(cpuinfo: str) -> str:
    """The CPU's model name with the logical CPU count: ``AMD EPYC (2 logical CPUs)``."""
    name = next((x.split(":", 1)[1].strip() for x in cpuinfo.splitlines() if x.startswith("model name")),
                platform.processor() or "unknown CPU")
    return f"{name} ({os.cpu_count()} logical CPUs)"


def read_cpuinfo(proc: Path = Path("/proc")) -> str:
    """This machine's ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        return (proc / "cpuinfo").read_text()
    except OSError:
        return ""


def load_1min(proc: Path = Path("/proc")) -> float:
    """The 1-minute load average."""
    return float((proc / "loadavg").read_text().split()[0])
