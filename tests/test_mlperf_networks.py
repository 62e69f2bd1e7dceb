"""MLPerf's networks as chipcal builds them (model.workload.mlperf_networks), counted against a
second tool (torch.utils.flop_counter: 2 FLOP per MAC of its convolutions and matmuls), a published
figure or a count by hand."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from chipcal.model.workload.mlperf_networks import (
    BERT,
    BERT_TOKENS,
    DLRM,
    DLRM_HOTS,
    DLRM_ROWS,
    NETWORKS,
    RETINANET,
    SDXL_UNET,
    SDXL_VAE,
    UNET3D,
    characterize_network,
)


def _flop_counter(name: str, batch: int = 1, **override) -> tuple[int, torch.nn.Module]:
    """(FLOP torch's counter sees, the module) of network `name` run once on the meta device."""
    network = NETWORKS[name]
    with torch.device("meta"):
        module = network.build().eval()
    inputs = override.get("inputs") or network.example(batch)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(*inputs)
    return counter.get_total_flops(), module


def test_mlperf_retinanet_macs_agree_with_torchs_flop_counter():
    """MLPerf's RetinaNet (ResNeXt50-32x4d FPN, 264 classes, 800 x 800) counted by chipcal and by a
    second tool, torch.utils.flop_counter (2 FLOP per MAC of its convolutions and matmuls): the same
    402.4 GFLOP of MACs at batch 1; chipcal's FLOP add the non-MAC work on top."""
    flop, network = _flop_counter(RETINANET)
    workload = characterize_network(RETINANET, 1)
    assert 2 * workload.macs == flop
    assert workload.flop > 2 * workload.macs and workload.params == sum(p.numel() for p in network.parameters())



def test_the_3d_unet_counts_as_torchs_flop_counter_and_by_hand():
    """One 128^3 sub-volume: chipcal's MACs are torch's counter's FLOP / 2. By hand, the first two
    convolutions: 128^3 voxels x 32 filters x 27 taps x (1, then 32) input channels."""
    flop, module = _flop_counter(UNET3D)
    workload = characterize_network(UNET3D, 1)
    assert 2 * workload.macs == flop and not workload.unclassified_ops
    voxels = 128 ** 3
    assert [op.macs for op in workload.ops if op.kind == "conv"][:2] == [voxels * 32 * 27, voxels * 32 * 27 * 32]
    assert workload.params == sum(p.numel() for p in module.parameters())


def test_bert_large_at_384_tokens_is_the_network_openvino_publishes():
    """OpenVINO's model card of BERT-Large SQuAD at 384 tokens (bert-large-uncased-whole-word-
    masking-squad-0001): 246.93 GOps, 333.96 M parameters. torch's counter on chipcal's build."""
    tokens = torch.zeros((1, 384), dtype=torch.long, device="meta")
    flop, module = _flop_counter(BERT, inputs=(tokens,))
    assert flop / 1e9 == pytest.approx(246.93, rel=0.005)
    assert sum(p.numel() for p in module.parameters()) / 1e6 == pytest.approx(333.96, rel=0.001)


def test_bert_at_its_mean_length_counts_by_hand():
    """Per layer and token 4 x 1024^2 (q, k, v, out) + 2 x 1024 x 4096 (the MLP) MACs, attention
    2 x T^2 x 1024 per layer, the span head 2 x 1024 per token; 24 layers, T = 177."""
    t = BERT_TOKENS
    by_hand = 24 * (t * (4 * 1024 ** 2 + 2 * 1024 * 4096) + 2 * t * t * 1024) + t * 2 * 1024
    assert characterize_network(BERT, 1).macs == by_hand


def test_dlrm_v2_counts_by_hand_and_reads_its_rows_not_its_tables():
    """Per user-item pair: bottom MLP 13.512 + 512.256 + 256.128, three low-rank cross layers
    2 x 3456 x 512 each, top MLP 3456.1024 + 1024.1024 + 1024.512 + 512.256 + 256.1 = 16,030,464
    MACs; 214 embedding rows of 128 fp32 values gathered out of 204 M rows."""
    workload = characterize_network(DLRM, 2)
    assert workload.macs == 2 * 16_030_464 and not workload.unclassified_ops
    assert sum(DLRM_HOTS) == 214 and sum(DLRM_ROWS) == 204_184_588
    bags = [op for op in workload.ops if any(t.target.startswith("aten._embedding_bag") for t in op.terms)]
    assert len(bags) == 26 and sum(w.nbytes for op in bags for w in op.weights) == 2 * 214 * 128 * 4


def test_sdxl_networks_hold_the_published_parameters():
    """stabilityai/stable-diffusion-xl-base-1.0's safetensors: UNet 2,567,463,684 parameters, VAE
    (encoder and decoder) 83,653,863, the two text encoders 817,720,320."""
    from chipcal.model.workload import sdxl

    with torch.device("meta"):
        modules = {name: build() for name, build in (("unet", sdxl.SdxlUNet), ("decoder", sdxl.SdxlVaeDecoder),
                                                      ("encoder", sdxl.SdxlVaeEncoder), ("text", sdxl.SdxlTextEncoders))}
    count = {name: sum(p.numel() for p in m.parameters()) for name, m in modules.items()}
    assert count["unet"] == 2_567_463_684
    assert count["decoder"] + count["encoder"] == 83_653_863
    assert count["text"] == 817_720_320


def test_sdxl_unet_and_decoder_count_as_torchs_flop_counter():
    """A sample's two latents through the UNet and one through the VAE's decoder: chipcal's MACs
    are torch's counter's FLOP / 2 (its matmuls, convolutions and attention), and the decoder's
    first convolution by hand: 128^2 positions x 512 filters x 9 taps x 4 channels. The UNet's
    workload is the cached one the MLPerf check predicts with (measure.workloads)."""
    from chipcal.measure.workloads import WorkloadSource

    flop, _ = _flop_counter(SDXL_UNET, 2)
    assert 2 * WorkloadSource().get(SDXL_UNET, 2, "fused").macs == flop
    flop, _ = _flop_counter(SDXL_VAE)
    decoder = characterize_network(SDXL_VAE, 1)
    assert 2 * decoder.macs == flop
    assert [op.macs for op in decoder.ops if op.kind == "conv"][1] == 128 * 128 * 512 * 9 * 4
