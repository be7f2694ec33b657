"""Shared fixtures: the SmolLM2 tokenizer from ../shared/data, the default model (fetched by
scripts/fetch-model.sh, as a user would), and the schemas of schemas/corpus."""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared" / "data"
TOKENIZER_JSON = SHARED / "tokenizers" / "smollm2-135m-instruct" / "tokenizer.json"
# SmolLM2's end-of-sequence: <|im_end|> (id 2).
SMOLLM2_EOS = 2

# Five corpus schemas the generation tests run under, and a regex.
GEN_SCHEMAS = ["person", "measurement", "order", "event", "review"]
GEN_REGEX = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"


def need(module: str):
    """Imports ``module``; skips the test where it is missing, unless STENCIL_PY_STRICT=1
    (the test script sets it: there, a missing package is a failure, not a skip)."""
    if os.environ.get("STENCIL_PY_STRICT") == "1":
        return __import__(module)
    return pytest.importorskip(module)


@pytest.fixture(scope="session")
def tokenizer_json():
    if not TOKENIZER_JSON.exists():
        if os.environ.get("STENCIL_PY_STRICT") == "1":
            pytest.fail(f"{TOKENIZER_JSON} is missing")
        pytest.skip(f"NOTICE: {SHARED} is not there (a clone without ../shared); skipping")
    return str(TOKENIZER_JSON)


@pytest.fixture(scope="session")
def tok(tokenizer_json):
    import stencil

    return stencil.Tokenizer.from_file(tokenizer_json, eos_ids=[SMOLLM2_EOS])


@pytest.fixture(scope="session")
def model_path():
    path = os.environ.get("STENCIL_MODEL")
    if not path:
        path = subprocess.run(
            [str(ROOT / "scripts" / "fetch-model.sh")], check=True, capture_output=True, text=True
        ).stdout.strip()
    return path


def corpus_schema(name: str) -> dict:
    with open(ROOT / "schemas" / "corpus" / f"{name}.json", encoding="utf-8") as f:
        return json.load(f)
