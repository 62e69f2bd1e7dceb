"""MLPerf Inference networks that torchvision's classification models do not cover, built as the
benchmark defines them, to be counted (weights=None, meta tensors).

- "retinanet_800": the object-detection benchmark's RetinaNet: torchvision's RetinaNet on a
  ResNeXt50-32x4d FPN backbone (C3-C5, P6 and P7 from P5), 264 classes (the OpenImages MLPerf
  subset), 800 x 800 images. Source: the v4.1 closed submissions' own model code,
  `closed/Intel/code/retinanet/pytorch-cpu/helpers/model/retinanet.py`
  (`retinanet_resnext50_32x4d_fpn`: `resnet_fpn_backbone('resnext50_32x4d', returned_layers=[2, 3, 4],
  extra_blocks=LastLevelP6P7(256, 256))`, `RetinaNet(backbone, num_classes)`) and `helpers/main.py`
  (num_classes 264, image_size [800, 800]), mlcommons/inference_results_v4.1 at 198fc467.
  Counted: the backbone, the FPN and both heads. Not counted: the anchors' box decoding and
  non-maximum suppression, which depend on the image's detections (TensorRT runs them as a plugin).
- "unet3d_kits19": the medical-imaging benchmark's 3D U-Net (nnU-Net style) on one 128 x 128 x 128
  sub-volume of a CT scan: filters 32, 64, 128, 256, 320; an input block of two 3x3x3
  convolutions; four stride-2 down blocks and a stride-2 bottleneck at 320; five up blocks (a 2x2x2
  stride-2 transposed convolution, concatenated with the skip, two 3x3x3 convolutions); every
  convolution followed by InstanceNorm3d (affine) and LeakyReLU(0.01); a 1x1x1 convolution to 3
  classes. Source: the model the benchmark's weights were trained with, mlcommons/training
  `image_segmentation/pytorch/model/unet3d.py` and `layers.py` (at 2c05bba0 and 4e11283d), which
  mlcommons/inference `vision/medical_imaging/3d-unet-kits19/README.md` names. One network call is
  one sub-volume; how many a KiTS19 case needs is the benchmark's (validate.mlperf_check).
  Counted: 477.3 GMAC per sub-volume. NVIDIA's engine replaces each transposed convolution by a
  1x1x1 convolution to 8x the channels and a pixel shuffle (its 3d-unet README): the same MACs.
- "bert_large_squad": the question-answering benchmark's BERT-Large (24 layers, hidden 1024, 16
  heads, intermediate 4096, vocabulary 30522; `closed/NVIDIA/code/bert/tensorrt/bert_config.json`)
  with its span head, built from transformers' BertConfig with random weights, SDPA attention.
  One sample is one SQuAD v1.1 sequence of at most 384 tokens (max_seq_length, the same README).
  Every closed v4.1 submitter removes the padding (NVIDIA's bert README, "Variable Sequence
  Lengths"; Intel's `closed/Intel/code/bert-99/pytorch-cpu` packs by token count), so a sample
  costs its real tokens: BERT_TOKENS = 177, the mean, from padding being 54 % of SQuAD v1.1's
  tokens at length 384 (Zhai et al., "ByteTransformer", openreview.net/forum?id=3nzKUh9a4M:
  0.46 x 384 = 176.6). Attention at the mean length stands for the mean of each sequence's own
  (length^2 would weigh long sequences more; attention is 4 % of the MACs at 177 tokens).
  Counted at 384 tokens: 123.2 GMAC, 334.1 M parameters (OpenVINO's model card of the same
  network: 246.93 GOps, 333.96 MParams).
- "dlrm_v2": the recommendation benchmark's DLRM-DCNv2 on one user-item pair: 13 dense features
  through a bottom MLP 13-512-256-128; 26 embedding tables of dimension 128 (rows
  40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
  11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36), each summing a
  fixed number of rows (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10,
  3, 1, 1: 214 lookups); the 27 x 128 = 3456 features through three low-rank (512) cross layers,
  x' = x0 * (W (V x) + b) + x; a top MLP 3456-1024-1024-512-256-1 and a sigmoid. Source:
  mlcommons/inference v4.1 `recommendation/dlrm_v2/pytorch/python/main.py` L185-202 and NVIDIA's
  `closed/NVIDIA/code/dlrm-v2/tensorrt/builder.py` L65-74, L450-499 and `criteo.py` L36-38.
  Counted: 16.03 M MAC per pair; 204.2 M embedding rows (26.1 GB at int8). How many pairs one
  LoadGen sample is belongs to the benchmark (validate.mlperf_benchmarks).
- "sdxl_unet", "sdxl_vae_decoder", "sdxl_text_encoders": Stable Diffusion XL's three networks
  (model.workload.sdxl), one call per latent, image or prompt; a sample runs all three
  (validate.mlperf_benchmarks.Stage).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from chipcal.model.workload import sdxl
from chipcal.model.workload.characterization import characterize
from chipcal.model.workload.fusion import partition_options
from chipcal.model.workload.tensors import dtype_name
from chipcal.model.workload.types import Workload

RETINANET = "retinanet_800"
UNET3D = "unet3d_kits19"
BERT = "bert_large_squad"
BERT_TOKENS = 177
DLRM = "dlrm_v2"
SDXL_UNET, SDXL_VAE, SDXL_TEXT = "sdxl_unet", "sdxl_vae_decoder", "sdxl_text_encoders"
DLRM_ROWS = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938,
             155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)
DLRM_HOTS = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)


def is_mlperf_network(name: str) -> bool:
    return name in NETWORKS


class _RetinaNetForward(torch.nn.Module):
    """RetinaNet's network without its post-processing: the FPN's levels through both heads."""

    def __init__(self, num_classes: int = 264):
        super().__init__()
        from torchvision.models.detection import RetinaNet
        from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
        from torchvision.ops.feature_pyramid_network import LastLevelP6P7

        backbone = resnet_fpn_backbone(backbone_name="resnext50_32x4d", weights=None, trainable_layers=5,
                                       returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(256, 256))
        detector = RetinaNet(backbone, num_classes=num_classes)
        self.backbone, self.head = detector.backbone, detector.head

    def forward(self, images: torch.Tensor):
        return self.head(list(self.backbone(images).values()))


def _block(channels_in: int, channels_out: int, stride: int = 1) -> torch.nn.Sequential:
    """3x3x3 convolution (no bias), InstanceNorm3d (affine), LeakyReLU(0.01)."""
    nn = torch.nn
    return nn.Sequential(nn.Conv3d(channels_in, channels_out, 3, stride, 1, bias=False),
                         nn.InstanceNorm3d(channels_out, affine=True), nn.LeakyReLU(0.01))


class _UpBlock(torch.nn.Module):
    def __init__(self, channels_in: int, channels_out: int):
        super().__init__()
        self.up = torch.nn.ConvTranspose3d(channels_in, channels_out, 2, 2)
        self.convs = torch.nn.Sequential(_block(2 * channels_out, channels_out), _block(channels_out, channels_out))

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.convs(torch.cat((self.up(x), skip), dim=1))


class _UNet3D(torch.nn.Module):
    """The 3D U-Net of the module docstring: one channel in, three classes out."""

    FILTERS = (32, 64, 128, 256, 320)

    def __init__(self):
        super().__init__()
        f = self.FILTERS
        self.entry = torch.nn.Sequential(_block(1, f[0]), _block(f[0], f[0]))
        self.down = torch.nn.ModuleList(torch.nn.Sequential(_block(a, b, 2), _block(b, b)) for a, b in zip(f, f[1:], strict=False))
        self.bottleneck = torch.nn.Sequential(_block(f[-1], f[-1], 2), _block(f[-1], f[-1]))
        pairs = [(f[-1], f[-1]), *zip(f[:0:-1], f[-2::-1], strict=True)]
        self.up = torch.nn.ModuleList(_UpBlock(a, b) for a, b in pairs)
        self.head = torch.nn.Conv3d(f[0], 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [x := self.entry(x)]
        for block in self.down:
            skips.append(x := block(x))
        x = self.bottleneck(x)
        for block, skip in zip(self.up, reversed(skips), strict=True):
            x = block(x, skip)
        return self.head(x)


class _BertQA(torch.nn.Module):
    """BERT-Large with its question-answering head, token ids in, start logits out."""

    def __init__(self):
        super().__init__()
        from transformers import BertConfig, BertForQuestionAnswering

        config = BertConfig(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                            intermediate_size=4096, max_position_embeddings=512, type_vocab_size=2,
                            attn_implementation="sdpa")
        self.bert = BertForQuestionAnswering(config)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=token_ids).start_logits


def _mlp(*widths: int, last_relu: bool = True) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for a, b in zip(widths, widths[1:], strict=False):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*(layers if last_relu else layers[:-1]))


class _DlrmV2(torch.nn.Module):
    """DLRM-DCNv2 of the module docstring: (dense features, table row indices) in, a click
    probability out."""

    DIM, RANK, CROSS_LAYERS = 128, 512, 3

    def __init__(self):
        super().__init__()
        width = self.DIM * (len(DLRM_ROWS) + 1)
        self.bottom = _mlp(13, 512, 256, self.DIM)
        self.tables = torch.nn.ParameterList(torch.nn.Parameter(torch.empty(rows, self.DIM)) for rows in DLRM_ROWS)
        self.down = torch.nn.ModuleList(torch.nn.Linear(width, self.RANK, bias=False) for _ in range(self.CROSS_LAYERS))
        self.up = torch.nn.ModuleList(torch.nn.Linear(self.RANK, width) for _ in range(self.CROSS_LAYERS))
        self.top = _mlp(width, 1024, 1024, 512, 256, 1, last_relu=False)

    def forward(self, dense: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        bags = torch.split(indices, DLRM_HOTS, dim=1)
        pooled = [torch.nn.functional.embedding_bag(bag, table, mode="sum") for bag, table in zip(bags, self.tables, strict=True)]
        x0 = x = torch.cat([self.bottom(dense), *pooled], dim=1)
        for down, up in zip(self.down, self.up, strict=True):
            x = x0 * up(down(x)) + x
        return torch.sigmoid(self.top(x))


@dataclass(frozen=True)
class Network:
    """How to build an MLPerf network, and the shape and dtype of each input of one sample."""

    build: type
    inputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]

    def example(self, batch: int) -> tuple[torch.Tensor, ...]:
        return tuple(torch.zeros((batch, *shape), dtype=dtype, device="meta") for shape, dtype in self.inputs)


NETWORKS = {RETINANET: Network(_RetinaNetForward, (((3, 800, 800), torch.float32),)),
            UNET3D: Network(_UNet3D, (((1, 128, 128, 128), torch.float32),)),
            BERT: Network(_BertQA, (((BERT_TOKENS,), torch.long),)),
            DLRM: Network(_DlrmV2, (((13,), torch.float32), ((sum(DLRM_HOTS),), torch.long))),
            # one call per latent (a sample runs two: classifier-free guidance), per image, per prompt
            SDXL_UNET: Network(sdxl.SdxlUNet, ((sdxl.LATENT, torch.float32), ((1,), torch.float32),
                                               ((sdxl.TOKENS, sdxl.CONTEXT), torch.float32), ((1280,), torch.float32),
                                               ((6,), torch.float32))),
            SDXL_VAE: Network(sdxl.SdxlVaeDecoder, ((sdxl.LATENT, torch.float32),)),
            SDXL_TEXT: Network(sdxl.SdxlTextEncoders, (((sdxl.TOKENS,), torch.long),))}


def characterize_network(name: str, batch: int = 1, partition: str = "fused") -> Workload:
    """The Workload of MLPerf network `name` at `batch` (module docstring), built on the meta
    device, partitioned as `partition` (fusion.PARTITIONS), traced in its weights' dtype."""
    if batch <= 0:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    network = NETWORKS[name]
    with torch.device("meta"):
        module = network.build().eval()
    workload = characterize(module, network.example(batch), model_name=name, **partition_options(partition))
    return replace(workload, dtype=dtype_name(next(module.parameters()).dtype))   # BERT's and DLRM's inputs hold indices
