"""Stable Diffusion XL's networks, built as diffusers builds them but from plain torch modules
(chipcal does not depend on diffusers), to be counted on meta tensors.

MLPerf's stable-diffusion-xl benchmark generates one 1024 x 1024 image per sample from
stabilityai/stable-diffusion-xl-base-1.0: its two CLIP text encoders on the prompt and the negative
prompt, 20 denoising steps of the UNet on two 128 x 128 x 4 latents (classifier-free guidance),
then the VAE's decoder (mlcommons/inference v4.1 `text_to_image/backend_pytorch.py` L18-19: 20
steps, guidance 8; NVIDIA's v4.1 configs batch each network apart,
`closed/NVIDIA/configs/stable-diffusion-xl/Offline/__init__.py`).

- The UNet (`unet/config.json` of the model): block_out_channels (320, 640, 1280), two ResNet
  blocks per level (three going up), cross-attention transformers of depth (0, 2, 10) with heads
  of 64 channels, context 2048, GEGLU feed-forward, linear projections in and out; the time
  embedding (320 -> 1280) plus the added text-and-time embedding (2816 -> 1280). 2,567,463,684
  parameters, as the model's safetensors hold.
- The VAE (`vae/config.json`): channels (128, 256, 512, 512), two ResNet blocks a level (three in
  the decoder), one single-head attention in the middle; 83,653,863 parameters with its encoder.
  A sample runs the decoder only (with post_quant_conv), from the latent to the image.
- The text encoders (`text_encoder/`, `text_encoder_2/config.json`): CLIP ViT-L/14's text tower
  and OpenCLIP ViT-bigG/14's with its projection, 77 tokens; 817,720,320 parameters together,
  built from transformers' CLIP classes.
"""

from __future__ import annotations

import math

import torch
from torch import nn

UNET_CHANNELS = (320, 640, 1280)
UNET_DEPTH = (0, 2, 10)          # transformer blocks per attention, per level (0: none)
HEAD_CHANNELS = 64
CONTEXT = 2048                   # the two text encoders' hidden states, concatenated
TIME_CHANNELS = 1280
LATENT = (4, 128, 128)           # a 1024 x 1024 image's latent
TOKENS = 77


def _group_norm(channels: int, eps: float = 1e-5) -> nn.GroupNorm:
    return nn.GroupNorm(32, channels, eps=eps)


def _timestep_embedding(t: torch.Tensor, channels: int) -> torch.Tensor:
    """Sinusoidal embedding, cos first (diffusers' flip_sin_to_cos, freq_shift 0)."""
    half = channels // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = t.float()[..., None] * freqs
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class _ResnetBlock(nn.Module):
    """diffusers' ResnetBlock2D: GroupNorm, SiLU, 3x3 conv (plus the time embedding), GroupNorm,
    SiLU, 3x3 conv, and the input (through a 1x1 conv where the channels change)."""

    def __init__(self, channels_in: int, channels_out: int, time_channels: int | None = TIME_CHANNELS):
        super().__init__()
        self.norm1, self.conv1 = _group_norm(channels_in), nn.Conv2d(channels_in, channels_out, 3, padding=1)
        self.time_emb_proj = nn.Linear(time_channels, channels_out) if time_channels else None
        self.norm2, self.conv2 = _group_norm(channels_out), nn.Conv2d(channels_out, channels_out, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(channels_in, channels_out, 1) if channels_in != channels_out else None

    def forward(self, x: torch.Tensor, temb: torch.Tensor | None = None) -> torch.Tensor:
        h = self.conv1(nn.functional.silu(self.norm1(x)))
        if self.time_emb_proj is not None:
            h = h + self.time_emb_proj(nn.functional.silu(temb))[:, :, None, None]
        h = self.conv2(nn.functional.silu(self.norm2(h)))
        return h + (x if self.conv_shortcut is None else self.conv_shortcut(x))


class _Attention(nn.Module):
    """Multi-head attention of `dim` channels over a context of `context` channels."""

    def __init__(self, dim: int, heads: int, context: int | None = None, bias: bool = False):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=bias)
        self.to_k = nn.Linear(context or dim, dim, bias=bias)
        self.to_v = nn.Linear(context or dim, dim, bias=bias)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        context = x if context is None else context
        b, n, d = x.shape
        q, k, v = (t.view(b, -1, self.heads, d // self.heads).transpose(1, 2)
                   for t in (self.to_q(x), self.to_k(context), self.to_v(context)))
        out = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


class _TransformerBlock(nn.Module):
    """diffusers' BasicTransformerBlock: self-attention, cross-attention, GEGLU feed-forward."""

    def __init__(self, dim: int):
        super().__init__()
        heads = dim // HEAD_CHANNELS
        self.norm1, self.attn1 = nn.LayerNorm(dim), _Attention(dim, heads)
        self.norm2, self.attn2 = nn.LayerNorm(dim), _Attention(dim, heads, CONTEXT)
        self.norm3, self.proj, self.out = nn.LayerNorm(dim), nn.Linear(dim, 8 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        x = x + self.attn1(self.norm1(x))
        x = x + self.attn2(self.norm2(x), context)
        value, gate = self.proj(self.norm3(x)).chunk(2, dim=-1)
        return x + self.out(value * nn.functional.gelu(gate))


class _Transformer2D(nn.Module):
    """diffusers' Transformer2DModel with linear projections: a feature map as tokens."""

    def __init__(self, dim: int, depth: int):
        super().__init__()
        self.norm, self.proj_in, self.proj_out = _group_norm(dim, 1e-6), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(_TransformerBlock(dim) for _ in range(depth))

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.proj_in(self.norm(x).permute(0, 2, 3, 1).reshape(b, h * w, c))
        for block in self.blocks:
            t = block(t, context)
        return x + self.proj_out(t).reshape(b, h, w, c).permute(0, 3, 1, 2)


class _Level(nn.Module):
    """One level of the UNet: ResNet blocks, each followed by a transformer where the level has one."""

    def __init__(self, ins: list[int], out: int, depth: int):
        super().__init__()
        self.resnets = nn.ModuleList(_ResnetBlock(c, out) for c in ins)
        self.attentions = nn.ModuleList(_Transformer2D(out, depth) for _ in ins) if depth else None

    def step(self, i: int, x: torch.Tensor, temb: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        x = self.resnets[i](x, temb)
        return x if self.attentions is None else self.attentions[i](x, context)


class SdxlUNet(nn.Module):
    """SDXL's UNet (module docstring): (latents, timestep, text states, pooled text, time ids) in,
    the predicted noise out."""

    def __init__(self):
        super().__init__()
        c = UNET_CHANNELS
        self.time_linear_1, self.time_linear_2 = nn.Linear(c[0], TIME_CHANNELS), nn.Linear(TIME_CHANNELS, TIME_CHANNELS)
        self.add_linear_1 = nn.Linear(1280 + 6 * 256, TIME_CHANNELS)
        self.add_linear_2 = nn.Linear(TIME_CHANNELS, TIME_CHANNELS)
        self.conv_in = nn.Conv2d(4, c[0], 3, padding=1)
        self.down = nn.ModuleList(_Level([c[max(i - 1, 0)], c[i]], c[i], UNET_DEPTH[i]) for i in range(3))
        self.downsamplers = nn.ModuleList(nn.Conv2d(c[i], c[i], 3, stride=2, padding=1) for i in range(2))
        self.mid_resnets = nn.ModuleList(_ResnetBlock(c[2], c[2]) for _ in range(2))
        self.mid_attention = _Transformer2D(c[2], UNET_DEPTH[2])
        skips = [c[0]] * 4 + [c[1]] * 3 + [c[2]] * 2
        self.up, self.upsamplers = nn.ModuleList(), nn.ModuleList()
        previous = c[2]
        for level in (2, 1, 0):
            ins = [(previous if j == 0 else c[level]) + skips.pop() for j in range(3)]
            self.up.append(_Level(ins, c[level], UNET_DEPTH[level]))
            previous = c[level]
            if level:
                self.upsamplers.append(nn.Conv2d(c[level], c[level], 3, padding=1))
        self.norm_out, self.conv_out = _group_norm(c[0]), nn.Conv2d(c[0], 4, 3, padding=1)

    def _embedding(self, t: torch.Tensor, pooled: torch.Tensor, time_ids: torch.Tensor) -> torch.Tensor:
        temb = self.time_linear_2(nn.functional.silu(self.time_linear_1(_timestep_embedding(t, UNET_CHANNELS[0]))))
        added = torch.cat([pooled, _timestep_embedding(time_ids, 256).flatten(1)], dim=-1)
        return temb + self.add_linear_2(nn.functional.silu(self.add_linear_1(added)))

    def forward(self, x, t, context, pooled, time_ids):
        temb = self._embedding(t[:, 0], pooled, time_ids)
        skips = [x := self.conv_in(x)]
        for i, level in enumerate(self.down):
            for j in range(2):
                skips.append(x := level.step(j, x, temb, context))
            if i < 2:
                skips.append(x := self.downsamplers[i](x))
        x = self.mid_resnets[1](self.mid_attention(self.mid_resnets[0](x, temb), context), temb)
        for i, level in enumerate(self.up):
            for j in range(3):
                x = level.step(j, torch.cat([x, skips.pop()], dim=1), temb, context)
            if i < 2:
                x = self.upsamplers[i](nn.functional.interpolate(x, scale_factor=2.0, mode="nearest"))
        return self.conv_out(nn.functional.silu(self.norm_out(x)))


class _VaeAttention(nn.Module):
    """The VAE's single-head attention over the feature map's positions, with its GroupNorm."""

    def __init__(self, dim: int):
        super().__init__()
        self.group_norm, self.attention = _group_norm(dim, 1e-6), _Attention(dim, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.group_norm(x).view(b, c, h * w).transpose(1, 2)
        return x + self.attention(t).transpose(1, 2).reshape(b, c, h, w)


def _mid(dim: int) -> nn.ModuleList:
    return nn.ModuleList([_ResnetBlock(dim, dim, None), _VaeAttention(dim), _ResnetBlock(dim, dim, None)])


VAE_CHANNELS = (128, 256, 512, 512)


class SdxlVaeDecoder(nn.Module):
    """The VAE's decoder with post_quant_conv (module docstring): a latent in, an image out."""

    def __init__(self):
        super().__init__()
        c = VAE_CHANNELS[::-1]
        self.post_quant_conv, self.conv_in = nn.Conv2d(4, 4, 1), nn.Conv2d(4, c[0], 3, padding=1)
        self.mid = _mid(c[0])
        self.blocks = nn.ModuleList(nn.ModuleList(_ResnetBlock(c[max(i - 1, 0)] if j == 0 else c[i], c[i], None)
                                                  for j in range(3)) for i in range(4))
        self.upsamplers = nn.ModuleList(nn.Conv2d(c[i], c[i], 3, padding=1) for i in range(3))
        self.norm_out, self.conv_out = _group_norm(c[-1], 1e-6), nn.Conv2d(c[-1], 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(self.post_quant_conv(z))
        for layer in self.mid:
            x = layer(x)
        for i, block in enumerate(self.blocks):
            for resnet in block:
                x = resnet(x)
            if i < 3:
                x = self.upsamplers[i](nn.functional.interpolate(x, scale_factor=2.0, mode="nearest"))
        return self.conv_out(nn.functional.silu(self.norm_out(x)))


class SdxlVaeEncoder(nn.Module):
    """The VAE's encoder with quant_conv: not run by a sample, built for the parameter count."""

    def __init__(self):
        super().__init__()
        c = VAE_CHANNELS
        self.conv_in = nn.Conv2d(3, c[0], 3, padding=1)
        self.blocks = nn.ModuleList(nn.ModuleList(_ResnetBlock(c[max(i - 1, 0)] if j == 0 else c[i], c[i], None)
                                                  for j in range(2)) for i in range(4))
        self.downsamplers = nn.ModuleList(nn.Conv2d(c[i], c[i], 3, stride=2) for i in range(3))
        self.mid = _mid(c[-1])
        self.norm_out, self.conv_out = _group_norm(c[-1], 1e-6), nn.Conv2d(c[-1], 8, 3, padding=1)
        self.quant_conv = nn.Conv2d(8, 8, 1)


class SdxlTextEncoders(nn.Module):
    """Both CLIP text towers (module docstring) on the same token ids: the penultimate states of
    each, concatenated (2048 channels), and bigG's projected pooled state."""

    def __init__(self):
        super().__init__()
        from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

        common = {"vocab_size": 49408, "max_position_embeddings": TOKENS, "attn_implementation": "sdpa"}
        self.clip_l = CLIPTextModel(CLIPTextConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                                   num_attention_heads=12, hidden_act="quick_gelu", **common))
        self.clip_g = CLIPTextModelWithProjection(CLIPTextConfig(
            hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
            hidden_act="gelu", projection_dim=1280, **common))

    def forward(self, token_ids: torch.Tensor):
        small = self.clip_l(token_ids, output_hidden_states=True)
        big = self.clip_g(token_ids, output_hidden_states=True)
        return torch.cat([small.hidden_states[-2], big.hidden_states[-2]], dim=-1), big.text_embeds
