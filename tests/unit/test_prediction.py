"""Predicted Outputs: the prediction fed into ngram-mod's pool, OpenAI's counts reported."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from fronde.json_types import JSON
from fronde.request.predicted_outputs import prediction_counts, prediction_text


def test_the_prediction_text_is_a_string_or_its_text_parts() -> None:
    assert prediction_text({"prediction": {"type": "content", "content": "x = 1"}}) == "x = 1"
    parts: list[JSON] = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert prediction_text({"prediction": {"type": "content", "content": parts}}) == "ab"
    assert prediction_text({"prediction": {"content": ""}}) is None
    assert prediction_text({}) is None


def test_counts_are_the_prediction_tokens_found_in_order_and_the_rest() -> None:
    assert prediction_counts([1, 2, 3, 4], [1, 2, 9, 4]) == (3, 1)
    assert prediction_counts([1, 2, 3], []) == (0, 3)
    assert prediction_counts([], [5]) == (0, 0)


def chat(prediction: str, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "alpha beta"}],
        "max_tokens": 4,
        "prediction": {"type": "content", "content": prediction},
    }


def test_a_prediction_is_fed_to_ngram_mod_and_its_tokens_counted(plain: TestClient) -> None:
    r = plain.post("/v1/chat/completions", json=chat("alpha beta gamma delta", "fronde:ngram-mod"))
    assert r.status_code == 200, r.text
    assert r.headers["x-fronde-prediction-fed"] == "true"
    assert float(r.headers["x-fronde-prediction-feed-ms"]) >= 0
    details = r.json()["usage"]["completion_tokens_details"]
    # The fake answers "alpha beta alpha beta": the prediction's "alpha beta" is found.
    predicted = len(
        plain.post("/tokenize", json={"content": "alpha beta gamma delta"}).json()["tokens"]
    )
    assert details["accepted_prediction_tokens"] >= 1
    assert (
        details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] == predicted
    )


def test_no_feed_where_no_pool_keeps_it(plain: TestClient) -> None:
    r = plain.post("/v1/chat/completions", json=chat("alpha beta", "fronde:ngram-simple"))
    assert r.status_code == 200, r.text
    assert "x-fronde-prediction-fed" not in r.headers
    assert "accepted_prediction_tokens" in r.json()["usage"]["completion_tokens_details"]


def test_the_benchmarks_edits_are_distinct_and_its_table_pairs_them() -> None:
    from fronde.bench.prediction import EDITS, PredictionSample, prediction_grid

    assert len({e.old for e in EDITS}) == len(EDITS)
    assert EDITS[0].old not in EDITS[0].prompt("diff-only")
    assert EDITS[0].old in EDITS[0].prompt("file-in-prompt")

    def sample(arm: str, edit: int, tok_s: float, wall: float) -> PredictionSample:
        fed = 5.0 if arm == "with" else None
        return PredictionSample("diff-only", arm, edit, tok_s, 0.5, 10, wall, fed, 3, "t")

    samples = [sample("without", 0, 100, 1.0), sample("with", 0, 150, 1.2)]
    page = prediction_grid(samples, "t").markdown()
    assert "| diff-only | with ÷ without | 1.50 | | 1.20 |" in page
    assert "| diff-only | with | 150.00 | 0.50 | 1.20 | 5.00 | 3.00 | 1/1 |" in page
