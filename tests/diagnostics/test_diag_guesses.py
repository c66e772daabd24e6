"""Where a search agent's correct answer came from: found by a search that returned its document, or guessed."""

import math

import pytest

from lit_grpo.diagnostics.guesses import answer_source, guess_summary, returned_document

QUESTION = [{"role": "system", "content": "Answer with the search tool."},
            {"role": "user", "content": "In which year was Tremskax Starstiol born?"}]
CALL = {"role": "assistant", "content": '<tool_call>{"name": "search", "arguments": {"query": "Starstiol"}}</tool_call>'}
ANSWER = {"role": "assistant", "content": "1755"}


def _result(*ids):
    return {"role": "tool", "name": "search", "content": "\n".join(f"[{i}] Title: text" for i in ids)}


@pytest.mark.parametrize(
    ("messages", "calls", "correct", "source"),
    [
        (QUESTION + [CALL, _result("doc-001", "doc-000"), ANSWER], 1, True, "found"),
        (QUESTION + [ANSWER], 0, True, "guess_no_search"),
        (QUESTION + [CALL, _result("doc-001", "doc-002"), ANSWER], 1, True, "guess_not_returned"),
        # a second search that does return the document makes it found
        (QUESTION + [CALL, _result("doc-001"), CALL, _result("doc-000"), ANSWER], 2, True, "found"),
        (QUESTION + [CALL, _result("doc-000"), {"role": "assistant", "content": "1756"}], 1, False, "wrong"),
        (QUESTION + [ANSWER], 0, False, "wrong"),
    ],
)
def test_each_source(messages, calls, correct, source):
    assert answer_source(messages, calls, correct, "doc-000") == source


def test_only_observations_after_an_assistant_turn_count():
    # the id in the opening messages (e.g. quoted in a question) is not a search result
    opening = [{"role": "user", "content": "What does [doc-000] say?"}, ANSWER]
    assert not returned_document(opening, "doc-000")
    # nor does the policy's own turn that names the id
    assert not returned_document(QUESTION + [{"role": "assistant", "content": "[doc-000]"}], "doc-000")
    # an id that only begins like the answering one is another document
    assert not returned_document(QUESTION + [CALL, _result("doc-0001")], "doc-000")
    assert returned_document(QUESTION + [CALL, {"role": "user", "content": "<tool_response>\n[doc-000] T: x"}],
                             "doc-000")


def test_the_answering_document_must_be_named():
    with pytest.raises(ValueError, match="doc_id is empty"):
        returned_document(QUESTION, "")


def test_summary_by_hand():
    sources = ["found", "guess_no_search", "guess_not_returned", "wrong", "found", "wrong"]
    returned = [True, False, False, True, True, False]
    advantages = [0.5, 1.5, 1.0, -0.5, 0.25, -1.0]
    out = guess_summary(sources, returned, advantages)
    assert out["episode/guess_frac"] == pytest.approx(2 / 6)
    assert out["episode/guess_no_search_frac"] == pytest.approx(1 / 6)
    assert out["episode/guess_not_returned_frac"] == pytest.approx(1 / 6)
    assert out["episode/found_frac"] == pytest.approx(2 / 6)
    assert out["episode/doc_returned_frac"] == pytest.approx(3 / 6)  # a wrong answer beside its document counts
    assert out["episode/guess_share_of_correct"] == pytest.approx(2 / 4)
    assert out["episode/guess_advantage_mean"] == pytest.approx((1.5 + 1.0) / 2)
    assert out["episode/found_advantage_mean"] == pytest.approx((0.5 + 0.25) / 2)


def test_shares_of_nothing_are_nan():
    out = guess_summary(["wrong", "wrong"], [False, True], [0.0, 0.0])
    assert out["episode/guess_frac"] == 0.0
    assert math.isnan(out["episode/guess_share_of_correct"])
    assert math.isnan(out["episode/guess_advantage_mean"]) and math.isnan(out["episode/found_advantage_mean"])
    assert guess_summary([], []) == {}
    assert "episode/guess_advantage_mean" not in guess_summary(["found"], [True])


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="1 returned flags for 2 episodes"):
        guess_summary(["found", "wrong"], [True])
    with pytest.raises(ValueError, match="1 advantages for 2 episodes"):
        guess_summary(["found", "wrong"], [True, False], [0.0])
