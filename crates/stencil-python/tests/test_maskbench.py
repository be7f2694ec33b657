"""The package computes the same masks as the Rust matcher on a MaskBench sample, and the
Python MaskBench runner reaches the same verdicts as `stencil bench maskbench`."""

import json
import os
import subprocess

import pytest

from conftest import ROOT, SHARED
from stencil import maskbench

LIMIT = "3"  # files per MaskBench folder: 51 schemas, every subset


def _stencil_bin():
    path = os.environ.get("STENCIL_BIN") or str(ROOT / "target" / "debug" / "stencil")
    if not os.path.exists(path):
        if os.environ.get("STENCIL_PY_STRICT") == "1":
            pytest.fail(f"{path} is missing (build it with cargo build -p stencil-cli)")
        pytest.skip(f"{path} is missing; build it with cargo build -p stencil-cli")
    return path


@pytest.fixture(scope="module")
def sample(tokenizer_json):
    root = SHARED / "maskbench"
    if not root.exists():
        pytest.skip(f"NOTICE: {root} is not there; skipping")
    return [str(d) for d in sorted(root.iterdir()) if d.is_dir()]


def _data_args(dirs):
    return [a for d in dirs for a in ("--data", d)]


def test_masks_identical_to_the_rust_matcher(tokenizer_json, sample, tmp_path):
    dump = tmp_path / "masks.bin"
    subprocess.run(
        [_stencil_bin(), "bench", "maskbench", "--tokenizer", tokenizer_json, "--limit", LIMIT,
         "--dump-masks", str(dump)] + _data_args(sample),
        check=True, capture_output=True,
    )
    got = maskbench.check_dump(tokenizer_json, sample, int(LIMIT), str(dump))
    assert got["schemas"] >= 40 and got["masks_compared"] >= 5000, got


def test_runner_agrees_with_stencil_bench_maskbench(tokenizer_json, sample):
    rust = subprocess.run(
        [_stencil_bin(), "bench", "maskbench", "--tokenizer", tokenizer_json, "--limit", LIMIT] + _data_args(sample),
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()[-1]
    rust = json.loads(rust)
    py = maskbench.run(tokenizer_json, sample, int(LIMIT))
    for key in ("files", "compiled", "passing", "tests", "vocab"):
        assert py[key] == rust[key], key
    assert set(py["mask_us"]) == set(rust["mask_us"])
    assert py["mask_us"]["count"] >= 5000
