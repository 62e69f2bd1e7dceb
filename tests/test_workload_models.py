"""Whole-model totals: hand-derived ResNet-50 and ViT-B/16, torchvision's published GMACs, the zoo."""

from __future__ import annotations

import pytest
import torch
import torchvision

from chipcal.model.workload import (
    UnknownModelError,
    build_model,
    characterize_model,
    classification_models,
    default_input_size,
)

FAST_SET = ("resnet18", "mobilenet_v2", "efficientnet_b0", "vit_b_16")


def test_resnet50_conv_and_linear_macs_by_hand():
    # torchvision ResNet-50 (v1.5: stride on the 3x3 conv), 224x224, batch 1. MACs of a conv =
    # H_out*W_out*C_out*C_in*k*k.
    # stem 7x7 3->64 at 112x112:                          12544*64*3*49        =   118,013,952
    # bottleneck at HW with width c, output 4c, input c_in (all at HW unless said):
    #   1x1 c_in->c (at the block's input resolution), 3x3 c->c, 1x1 c->4c
    #   block with c_in = 4c:  HW*(4c*c + 9c*c + 4c*c) = 17*HW*c^2
    #     layer1 HW=3136 c=64: 17*3136*4096 = 218,365,952;  layer2 HW=784 c=128: 218,365,952
    #     layer3 HW=196 c=256: 218,365,952;                  layer4 HW=49 c=512:  218,365,952
    #   first block of a layer: 1x1 at the input resolution HWi, 3x3 (stride) and 1x1 at HW,
    #   plus the 1x1 (stride) downsample c_in->4c at HW:
    #     layer1 (c_in 64, HWi = HW = 3136): 12,845,056 + 115,605,504 + 51,380,224 + 51,380,224 = 231,211,008
    #     layer2 (c_in 256, HWi 3136, HW 784): 102,760,448 + 115,605,504 + 51,380,224 + 102,760,448 = 372,506,624
    #     layer3 and layer4 (c_in = 2c, HWi = 4 HW): the same terms                            = 372,506,624
    # layers: 231,211,008 + 2*218,365,952 = 667,942,912;  372,506,624 + 3*218,365,952 = 1,027,604,480
    #         372,506,624 + 5*218,365,952 = 1,464,336,384; 372,506,624 + 2*218,365,952 = 809,238,528
    # convs: 118,013,952 + 667,942,912 + 1,027,604,480 + 1,464,336,384 + 809,238,528 = 4,087,136,256
    # fc 2048 -> 1000: 2,048,000.  Total 4,089,184,256 (torchvision's docs: 4.09 GFLOPS, i.e. GMACs)
    w = characterize_model("resnet50")
    by_class = w.macs_by_class()
    assert by_class["conv"] + by_class["conv1x1"] == 4_087_136_256
    assert by_class["matmul"] == 2_048_000
    assert w.macs == 4_089_184_256
    assert w.params == 25_557_032      # torchvision's published num_params


def test_vit_b_16_macs_with_attention_by_hand():
    # patch embedding 16x16/16 conv 3->768 on 224x224: 196 patches * 768 * 3*256 = 115,605,504
    # tokens T = 197 (196 + class token), D = 768, 12 heads of 64, MLP 3072; per layer:
    #   QKV projection T*D*3D = 197*768*2304 = 348,585,984; out projection T*D*D = 116,195,328
    #   Q.K^T 12*197*197*64 = 29,805,312; P.V the same = 29,805,312
    #   MLP 2 * T*D*3072 = 929,562,624          -> layer 1,453,954,560; 12 layers 17,447,454,720
    # head 768*1000 = 768,000.  Total 115,605,504 + 17,447,454,720 + 768,000 = 17,563,828,224
    w = characterize_model("vit_b_16")
    assert w.macs == 17_563_828_224
    assert w.macs_by_class()["attention"] == 12 * 2 * 29_805_312
    assert w.macs_by_class()["conv"] == 115_605_504


@pytest.mark.parametrize("name", FAST_SET)
def test_fast_set_characterizes_fully(name):
    w = characterize_model(name)
    assert (w.capture, w.execution) == ("fx", "meta")
    assert w.unclassified_ops == ()
    assert w.flop >= 2 * w.macs
    assert_matches_torchvision(w, name)


def assert_matches_torchvision(w, name):
    """torchvision publishes GMACs ('GFLOPS') per weights at their crop size, to 3 decimals."""
    size = default_input_size(name)[1]
    published = {weights.meta["_ops"] for weights in torchvision.models.get_model_weights(name)
                 if weights.transforms.keywords["crop_size"] == size}
    assert any(abs(w.macs / 1e9 - ops) <= 0.0005 + 1e-9 for ops in published), (w.macs, published)


def test_default_input_size():
    assert default_input_size("inception_v3") == (3, 299, 299)
    assert default_input_size("resnet50") == (3, 224, 224)
    assert default_input_size("efficientnet_b7") == (3, 600, 600)
    assert default_input_size("vit_h_14") == (3, 224, 224)   # weights=None builds the 224 architecture
    assert characterize_model("resnet18", input_size=(3, 112, 112)).input_shape == (1, 3, 112, 112)
    assert characterize_model("resnet18", batch=2, input_size=96).input_shape == (2, 3, 96, 96)


def test_build_model_and_unknown_names():
    model = build_model("resnet18")
    assert not model.training and next(model.parameters()).device.type == "cpu"
    assert next(build_model("resnet18", device="meta").parameters()).is_meta
    with pytest.raises(UnknownModelError) as info:
        characterize_model("resnet5")
    assert isinstance(info.value, KeyError)
    assert "resnet50" in str(info.value) and "valid: " in str(info.value)
    assert info.value.close[0] == "resnet50"


@pytest.mark.slow
@pytest.mark.parametrize("name", classification_models())
def test_every_torchvision_classifier(name):
    w = characterize_model(name)
    assert w.capture == "fx" and w.unclassified_ops == ()
    assert w.macs > 0 and w.flop >= 2 * w.macs and len(w.subgraphs) > 0
    assert_matches_torchvision(w, name)


def test_a_model_built_on_the_cpu_to_be_counted_is_not_initialized_and_init_comes_back():
    # regnet's constructor needs real tensors, so it is built on the CPU; its fills are skipped
    # (11 s for regnet_y_128gf) and torch.nn.init fills again afterwards, even after a failure
    import torch.nn.init as init

    from chipcal.model.workload.models import _uninitialized

    w = characterize_model("regnet_x_400mf")
    assert w.macs == pytest.approx(0.41e9, rel=0.02)    # torchvision's published 0.41 "GFLOPS" (GMACs)
    with pytest.raises(RuntimeError), _uninitialized():
        assert init.ones_(torch.zeros(2)).sum() == 0
        raise RuntimeError("constructor failed")
    assert init.ones_(torch.zeros(2)).sum() == 2
