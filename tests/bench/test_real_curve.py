"""``bench/real_curve.py`` reads the wall time and peak RSS of a run from the report of ``/usr/bin/time -v``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from real_curve import read_time_log  # noqa: E402

REPORT = """Epoch 1/-2 done
\tCommand being timed: "lit-grpo fit --config real/quickstart"
\tUser time (seconds): 1801.35
\tElapsed (wall clock) time (h:mm:ss or m:ss): {wall}
\tMaximum resident set size (kbytes): 5814452
\tExit status: 0
"""


@pytest.mark.parametrize("wall, seconds", [("15:31.16", 931.2), ("1:03:53", 3833.0), ("0:07.50", 7.5)])
def test_the_wall_time_is_read_in_both_of_its_formats(wall, seconds):
    got = read_time_log(REPORT.format(wall=wall))
    assert got["wall_s"] == seconds
    assert got["peak_rss_gib"] == 5.5  # 5814452 KiB / 2**20


def test_a_log_without_the_report_is_refused_with_the_command_to_make_one():
    with pytest.raises(SystemExit, match="/usr/bin/time -v -o FILE"):
        read_time_log("Epoch 1/-2 done\n")
