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
"""

from __future__ import annotations

import torch

from chipcal.model.workload.characterization import characterize
from chipcal.model.workload.fusion import partition_options
from chipcal.model.workload.types import Workload

RETINANET = "retinanet_800"


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


NETWORKS = {RETINANET: (_RetinaNetForward, (3, 800, 800))}     # name -> (builder, (C, H, W) of a sample)


def characterize_network(name: str, batch: int = 1, partition: str = "fused") -> Workload:
    """The Workload of MLPerf network `name` at `batch` (module docstring), built on the meta
    device, partitioned as `partition` (fusion.PARTITIONS)."""
    if batch <= 0:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    build, sample = NETWORKS[name]
    with torch.device("meta"):
        network = build().eval()
    example = torch.empty((batch, *sample), device="meta")
    return characterize(network, example, model_name=name, **partition_options(partition))
