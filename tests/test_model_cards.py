"""Every bundled model's card is a Hugging Face model card: YAML front matter with the licence
and a `model-index` of the measured results, then a short body (the history is in
CHANGELOG.md), so it reads the same on the documentation site and on a model hub."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT

MODELS = REPO_ROOT / "src" / "clearsight" / "assets" / "models"
CARDS = sorted(MODELS.glob("*/MODEL_CARD.md"))
MAX_LINES = 160


def front_matter(text: str) -> tuple[dict, str]:
    """The card's YAML front matter as a dict, and the Markdown after it."""
    assert text.startswith("---\n"), "the card must open with YAML front matter (---)"
    end = text.find("\n---\n", 4)
    assert end != -1, "the front matter must end with a --- line"
    meta = yaml.safe_load(text[4:end])
    assert isinstance(meta, dict), "the front matter must be a YAML mapping"
    return meta, text[end + 5 :]


def test_every_bundled_model_has_a_card():
    folders = {p.name for p in MODELS.iterdir() if (p / "config.json").is_file()}
    assert folders and folders == {c.parent.name for c in CARDS}


@pytest.mark.parametrize("card", CARDS, ids=lambda p: p.parent.name)
def test_card_has_the_hub_front_matter(card: Path):
    meta, body = front_matter(card.read_text(encoding="utf-8"))
    assert isinstance(meta.get("license"), str) and meta["license"], "license"
    if meta["license"] == "other":
        assert meta.get("license_name"), "license: other needs a license_name"
    assert meta.get("library_name") == "clearsight"
    assert isinstance(meta.get("pipeline_tag"), str)
    assert isinstance(meta.get("tags"), list) and meta["tags"]
    assert isinstance(meta.get("datasets"), list) and meta["datasets"]
    (entry,) = meta["model-index"]
    assert entry["name"] == card.parent.name
    assert entry["results"], "model-index needs at least one measured result"
    for result in entry["results"]:
        assert {"type", "name"} <= set(result["task"])
        assert {"type", "name"} <= set(result["dataset"])
        assert result["metrics"]
        for metric in result["metrics"]:
            assert {"type", "value", "name"} <= set(metric)
            assert isinstance(metric["value"], int | float), metric
    first = entry["results"][0]["metrics"][0]["value"]
    assert f"{first}" in body, f"the card's body must show its headline figure {first}"
    assert body.lstrip().startswith(f"# {card.parent.name}\n")


@pytest.mark.parametrize("card", CARDS, ids=lambda p: p.parent.name)
def test_card_is_short_and_says_how_to_run_it(card: Path):
    text = card.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, "move history to CHANGELOG.md"
    for heading in ("## How to run it", "## Evaluation", "## Limitations"):
        assert heading in text, heading
    assert "```bash\nclearsight " in text and "```python\nimport clearsight\n" in text


def test_front_matter_parser_rejects_a_card_without_it():
    with pytest.raises(AssertionError, match="front matter"):
        front_matter("# a card\n\nno metadata\n")
    meta, body = front_matter("---\nlicense: mit\n---\n# m\n")
    assert meta == {"license": "mit"} and body == "# m\n"


def test_changelog_keeps_the_history():
    text = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog") and "## [Unreleased]" in text
    assert "#### default-derain v2\n" in text and "#### default-demoire v1\n" in text
