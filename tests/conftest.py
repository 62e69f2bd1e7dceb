"""Shared test configuration: skip `gpu` tests on machines without CUDA."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def cli(capsys):
    """Run a CLI `main(argv)` in-process: returns (exit status, stdout, stderr)."""

    def call(main, argv):
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        return rc, out, err

    return call
