"""Issue 55 on lent H200s (torch 2.11, transformers 5.17): torch.compile (reduce-overhead, bf16 weights)
and Hugging Face generate end to end, predicted for the registry's h200-sxm with the default
parameters (no calibration: what a user gets for a chip he does not own), against the timings
recorded there (tests/machines/README.md; docs/findings/2026-11-30-h200-compiled-and-generate.md)."""

from __future__ import annotations

import json
import statistics

import pytest
from recorded import MACHINES

from chipcal.model.registry import load_registry

FOLDER = MACHINES / "nvidia-h200"
BOUND = 0.35         # issue 55: compiled and generate predictions against a GPU's timings


def recorded(name: str):
    return json.loads((FOLDER / name).read_text())


def compiled_rows() -> dict[str, float]:
    """Seconds per forward pass, bf16 weights: batch 1 and 8 from models-bf16-20261129.json, batch 64
    from the calibration's own compiled rows (users-run-20261129.json), the same mode."""
    rows = {f"{r['model']} b{r['batch']}": r["latency_s"] for r in recorded("models-bf16-20261129.json")
            if r["runtime"] == "compiled"}
    rows.update({f"{r['model']} b{r['batch']}": r["measured_s"] for r in recorded("users-run-20261129.json")["rows"]
                 if r["kind"] == "compiled" and r["mode"] == "bf16"})
    return rows


@pytest.fixture(scope="module")
def h200():
    return load_registry().get("h200-sxm")


@pytest.fixture(scope="module")
def compiled_errors(h200) -> dict[str, float]:
    from chipcal.model.estimate.prediction import predict
    from chipcal.model.workload import characterize_model

    errors = {}
    for key, measured_s in compiled_rows().items():
        model, batch = key.split(" b")
        workload = characterize_model(model, int(batch), partition="codegen")
        errors[key] = predict(workload, h200, "bf16", runtime="compiled").latency_s / measured_s - 1
    return errors


def test_the_recorded_compiled_rows_are_bf16_weights_under_reduce_overhead():
    rows = [r for r in recorded("models-bf16-20261129.json") if r["runtime"] == "compiled"]
    assert len(rows) == 6 and {(r["precision"], r["compile_mode"], r["device"]) for r in rows} == {
        ("bf16", "reduce-overhead", "cuda:0")}


def test_compiled_predictions_within_the_bound(compiled_errors):
    """Eight rows, three models at batch 1, 8 and 64: median |error| within 25 %, every row within
    35 % (when this was written: median 13 %, -26 % to +29 %, mobilenet_v2 at batch 1 the widest; it
    was +51 % at the corpus's 10.5k cycles per kernel, params.PYTORCH_OVERHEAD_CYCLES; vit_b_16 at
    batch 8 was -29 % before its attention's packed projections were copied, attention.py)."""
    assert len(compiled_errors) == 8
    assert statistics.median(abs(e) for e in compiled_errors.values()) <= 0.25, compiled_errors
    assert all(abs(e) <= BOUND for e in compiled_errors.values()), compiled_errors


@pytest.mark.parametrize("model, library", [("resnet50", ("conv", "conv1x1")), ("vit_b_16", ("matmul", "attention"))])
def test_compiled_at_batch_64_is_not_faster_than_the_eager_library_kernels(h200, model, library):
    """Batch 64: Inductor calls the same cuDNN convolutions, cuBLAS GEMMs and SDPA kernels eager does
    (channels-last), so the compiled prediction sits above those kernels' time in the eager
    prediction, and below eager's measured time for ResNet-50 (7.78 ms; ViT-B/16's compiled ran slower
    than its eager 6.19 ms, docs/findings/2026-11-30-compiled-multihead-attention.md)."""
    from chipcal.model.estimate.prediction import predict
    from chipcal.model.workload import characterize_model

    compiled = predict(characterize_model(model, 64, partition="codegen"), h200, "bf16", runtime="compiled")
    eager = predict(characterize_model(model, 64, partition="eager"), h200, "bf16", runtime="eager",
                    host_overhead_s=0.0, memory_format="channels_last")
    kernels_s = sum(e.latency_s for e in eager.subgraphs if e.op_class in library)
    assert kernels_s > 0.5 * eager.latency_s and compiled.latency_s >= kernels_s
    measured = {f"{r['model']} b{r['batch']}": r["latency_s"] for r in recorded("models-bf16-20261129.json")
                if r["runtime"] == "eager"}
    assert model != "resnet50" or compiled.latency_s < measured["resnet50 b64"]


@pytest.mark.parametrize("model", ["llama-3.2-1b", "llama-3-8b"])
def test_generate_end_to_end_within_the_bound(source, model):
    """generate (64 new tokens after a 32-token prompt, batch 1) against the eager prediction at the
    default PyTorch 2.x host cost: within 35 % (1b +13 %, 8b +21 % when this was written)."""
    pytest.importorskip("transformers")
    from chipcal.model.estimate.llm import predict_llm
    from chipcal.model.workload.llm_config import load_llm_config, step_key

    row = next(r for r in recorded("llm-generate-20261129.json") if r["model"] == model and r["runtime"] == "generate")
    assert (row["context"], row["new_tokens"], row["batch"], row["precision"]) == (32, 64, 1, "bf16")
    config = load_llm_config(model)
    steps = [source.llm_step(step_key(config, "eager", phase, 1, 32, 64, "bf16")) for phase in ("prefill", "decode")]
    p = predict_llm(config, *steps, load_registry().get("h200-sxm"), "bf16", "eager", 32, 64)
    assert 1 / p.tokens_per_s == pytest.approx(row["latency_s"], rel=BOUND)


@pytest.mark.parametrize("slots", [8, 32])
def test_continuous_batching_within_issue_53s_bound(source, slots):
    """Issue 53 item 6 on the GPU: the continuous-batching loop (measure.batching) of llama-3.2-1b in
    bf16 with 8 and 32 slots, prompts and outputs uniform within +-50 % of 256 and 64 tokens,
    against the offline prediction from the mean lengths the queue had: within 25 % (+11 % and
    +3 % when this was written)."""
    pytest.importorskip("transformers")
    from chipcal.model.estimate.serving import offline
    from chipcal.model.workload.llm_config import load_llm_config

    row = next(r for r in recorded("serving-20261129.json") if r["batch"] == slots)
    assert (row["runtime"], row["model"], row["requests"], row["device"]) == ("offline", "llama-3.2-1b", 6 * slots, "cuda:0")
    served = offline(load_llm_config("llama-3.2-1b"), load_registry().get("h200-sxm"), "bf16", "eager",
                     row["context"], row["new_tokens"], source.llm_step, max_batch=slots)
    assert served.tokens_per_s == pytest.approx(row["tokens_per_s"], rel=0.25)
