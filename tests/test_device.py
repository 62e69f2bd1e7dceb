"""measure.device: one parser for device strings, one error that says what is valid."""

from __future__ import annotations

import pytest
import torch

from chipcal.measure.device import CPU, Device, DeviceUnavailable
from chipcal.model.errors import ChipcalError, DeviceError


@pytest.mark.parametrize("text,kind,index,name", [
    ("cpu", "cpu", 0, "cpu"),
    (" CPU ", "cpu", 0, "cpu"),
    ("cuda", "cuda", 0, "cuda:0"),
    ("cuda:3", "cuda", 3, "cuda:3"),
    ("CUDA:12", "cuda", 12, "cuda:12"),
])
def test_parse(text, kind, index, name):
    device = Device.parse(text)
    assert (device.kind, device.index, str(device)) == (kind, index, name)
    assert Device.parse(device) is device
    assert Device(kind, index) == device and Device.parse(str(device)) == device
    assert (CPU.kind, CPU.index) == ("cpu", 0)


@pytest.mark.parametrize("text", ["tpu", "npu", "cuda:x", "cuda:", "cpu:0", "cuda:-1", "", "mps"])
def test_bad_device_is_one_error_saying_what_is_valid(text):
    with pytest.raises(DeviceError, match="valid: cpu, cuda, cuda:N") as info:
        Device.parse(text)
    assert isinstance(info.value, ChipcalError) and "\n" not in str(info.value)


def test_device_is_frozen():
    with pytest.raises(AttributeError):
        Device.parse("cpu").index = 1


def test_cuda_not_here(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert CPU.require() == Device("cpu")
    with pytest.raises(DeviceUnavailable, match="no CUDA device.*valid here: cpu"):
        Device.parse("cuda").require()


def test_cuda_index_out_of_range(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert Device.parse("cuda:1").require() == Device("cuda", 1)
    with pytest.raises(DeviceUnavailable, match=r"only 2 CUDA device\(s\); valid here: cpu, cuda:0..cuda:1"):
        Device.parse("cuda:2").require()
