"""docs/performance.md's generation-alone table is the committed run of bench/hf_decode.py rendered, and that run's
own loop drew generate's tokens whenever it was meant to."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from hf_decode import BEGIN, END, OUT, SETTINGS, render  # noqa: E402
from provenance import doc_block  # noqa: E402


def test_the_docs_block_is_the_committed_run_rendered():
    block = doc_block((ROOT / "docs" / "performance.md").read_text(), BEGIN, END)
    assert block == "\n" + render(json.loads(OUT.read_text())), \
        "docs/performance.md differs from its data: python bench/hf_decode.py --render --write docs/performance.md"


def test_the_run_times_every_setting_and_the_exact_loop_matched_generate():
    for workload, r in json.loads(OUT.read_text()).items():
        assert {f"{name}_s" for name in SETTINGS} <= set(r), f"{workload}: a setting was not timed"
        matched, rounds = (int(x) for x in r["own_same_tokens_as_generate"].removesuffix(" rounds").split("/"))
        assert matched == rounds == r["rounds"], f"{workload}: the own loop left generate's samples"


def test_the_profile_block_is_the_committed_profile_rendered():
    from hf_decode import PROFILE, PROFILE_BEGIN, PROFILE_END, render_profile

    block = doc_block((ROOT / "docs" / "performance.md").read_text(), PROFILE_BEGIN, PROFILE_END)
    assert block == "\n" + render_profile(json.loads(PROFILE.read_text())), \
        "docs/performance.md differs from its data: python bench/hf_decode.py --render --write docs/performance.md"


def test_a_profile_states_the_load_it_was_measured_at():
    from hf_decode import PROFILE, render_profile

    profile = json.loads(PROFILE.read_text())
    profile.update(load_before=0.31, load_after=1.87)
    assert "load average 0.31 before and 1.87 after" in render_profile(profile)
    del profile["load_before"], profile["load_after"]  # a profile published before the load was recorded
    assert "load average" not in render_profile(profile)


def test_the_doc_says_the_fastest_setting_misses_2x_only_while_every_pair_does():
    doc = (ROOT / "docs" / "performance.md").read_text()
    best = json.loads(OUT.read_text())["real"]["own_shrink_cdf_paired_speedup"]
    says_short = "short\nof the 2x over `generate`" in doc or "short of the 2x over `generate`" in doc
    assert says_short == (best["max"] < 2.0), "performance.md's sentence on the 2x target disagrees with the data"


def test_write_without_publish_is_refused_rather_than_rendering_older_data():
    import subprocess

    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "hf_decode.py"), "--profile", "--write", "x.md"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "measure with --publish, or redraw with --render" in proc.stderr


def test_the_compile_block_is_the_committed_comparison_rendered():
    from hf_decode import COMPILE, COMPILE_BEGIN, COMPILE_END, render_compile

    block = doc_block((ROOT / "docs" / "performance.md").read_text(), COMPILE_BEGIN, COMPILE_END)
    assert block == "\n" + render_compile(json.loads(COMPILE.read_text())), \
        "docs/performance.md differs from its data: python bench/hf_decode.py --render --write docs/performance.md"


def test_the_compile_verdict_reads_the_rule_on_the_pairs():
    """'pays' only when every pair's speedup per completion token exceeds 1, whatever the median says."""
    from hf_decode import COMPILE, render_compile

    r = json.loads(COMPILE.read_text())["real"]
    assert len(r["pairs"]) == r["rounds"] * r["reps"]
    for pairs, verdict in (([1.2, 1.1, 1.3], "pays"), ([1.2, 0.99, 1.3], "does not pay"), ([0.9, 0.95], "does not pay")):
        text = render_compile({"real": {**r, "pairs": pairs}})
        assert f"compiling the decode step {verdict} here" in text


def test_the_prose_under_the_compile_block_says_what_the_run_recorded():
    from hf_decode import COMPILE

    r = json.loads(COMPILE.read_text())["real"]
    doc = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    assert r["graph_breaks"] == [0] and len(r["graphs"]) == 1, r
    assert f"the loop's forward needs {r['graphs'][0]} graphs and no graph break" in doc
    assert all(x > 1 for x in r["pairs"]) == ("makes a decoding token a few percent cheaper once compiled" in doc)
    assert r["paired_speedup_per_token"]["median"] < 1.10, "the doc calls the gain a few percent"
