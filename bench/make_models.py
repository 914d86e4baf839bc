#!/usr/bin/python3
"""Exports the real-model set with Debian's torch/torchvision: random weights, fixed seed.

    make_models.py OUT_DIR [--only NAME[,NAME...]] [--opset N]

For each model it writes OUT_DIR/NAME.onnx plus NAME.input_K.pb / NAME.output_K.pb
(ONNX TensorProtos: a seeded input and PyTorch's own output for it), so the compiled model
can be checked against the reference interpreter and, independently, against PyTorch.

BatchNorm layers get random affine parameters and running statistics gathered in train
mode on random inputs: freshly initialised torchvision CNNs otherwise produce vanishing
outputs (MobileNetV2 around 1e-9) against which any comparison passes. The script refuses
to write a model whose reference output is degenerate (all outputs tiny or non-finite).
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision
from onnx import numpy_helper

SEED = 20261122


# --- a BERT-style encoder written out in plain modules (what BERT-base exports to) --------
class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask_bias):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_bias
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        b, h, s, d = context.shape
        return self.out(context.transpose(1, 2).reshape(b, s, h * d))


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in, self.ffn_out = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask_bias):
        x = self.norm1(x + self.attention(x, mask_bias))
        return self.norm2(x + self.ffn_out(nn.functional.gelu(self.ffn_in(x))))


class BertEncoder(nn.Module):
    def __init__(self, vocab, seq, hidden, layers, heads, ffn):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(seq, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)
        self.register_buffer("positions", torch.arange(seq).unsqueeze(0), persistent=False)

    def forward(self, input_ids, attention_mask):
        x = self.norm(self.word(input_ids) + self.position(self.positions))
        mask_bias = (1.0 - attention_mask[:, None, None, :]) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x, torch.tanh(self.pooler(x[:, 0]))


def bert_inputs(vocab, seq, gen, batch=1):
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq)
    mask[:, seq - seq // 8:] = 0  # padded tail, so the mask matters
    return ids, mask


# --- a GPT-2-style decoder-only transformer (pre-LayerNorm, causal attention, tanh GELU, tied
# output embedding), run over a whole prompt as a prefill does ------------------------------
class DecoderLayer(nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.ffn_in, self.ffn_out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        causal = torch.full((seq, seq), -1e4).triu(1)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + self.causal
        context = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(context)
        return x + self.ffn_out(nn.functional.gelu(self.ffn_in(self.norm2(x)), approximate="tanh"))


class Decoder(nn.Module):
    def __init__(self, vocab, seq, hidden, layers, heads):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(seq, hidden)
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, seq) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.register_buffer("positions", torch.arange(seq).unsqueeze(0), persistent=False)

    def forward(self, input_ids):
        x = self.word(input_ids) + self.position(self.positions)
        for layer in self.layers:
            x = layer(x)
        return torch.matmul(self.norm(x), self.word.weight.t())


def randomize_batchnorm(model, input_shape, gen, bn_only=False):
    """Random BN affine parameters, then running statistics from train-mode passes.

    bn_only: only the BatchNorm layers train (a detector in train mode wants targets)."""
    bns = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d))]
    for bn in bns:
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5, generator=gen)
            bn.bias.uniform_(-0.3, 0.3, generator=gen)
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration batches
    model.eval() if bn_only else model.train()
    for bn in bns:
        bn.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(4, *input_shape[1:], generator=gen))
    model.eval()


def randomize_norm_scales(model, gen):
    """ConvNeXt's layer scales start at 1e-6 and every LayerNorm at weight 1, bias 0: a block
    would then add almost nothing to its residual stream and a wrong block would pass
    unseen. Draw them instead (layer scale U(0.2, 0.6), LayerNorm weight U(0.5, 1.5), bias
    U(-0.3, 0.3))."""
    with torch.no_grad():
        for module in model.modules():
            scale = getattr(module, "layer_scale", None)
            if isinstance(scale, torch.Tensor):
                scale.uniform_(0.2, 0.6, generator=gen)
            if isinstance(module, nn.LayerNorm) and module.elementwise_affine:
                module.weight.uniform_(0.5, 1.5, generator=gen)
                module.bias.uniform_(-0.3, 0.3, generator=gen)


def cnn(factory, size=224, batch=1, norms=False):
    """The same weights at every batch size (fixed seeds); only the input grows.
    norms: also draw layer scales and LayerNorm parameters (randomize_norm_scales)."""
    def build(gen):
        torch.manual_seed(SEED)
        model = factory()
        shape = (1, 3, size, size)
        if norms:
            randomize_norm_scales(model, gen)
        randomize_batchnorm(model, shape, gen)
        return model, (torch.randn(batch, *shape[1:], generator=gen),), ["input"], ["logits"], 13
    return build


def video(factory, frames, size, batch=1):
    """A video classifier on [batch, 3, frames, size, size] (Conv3d, BatchNorm3d)."""
    def build(gen):
        torch.manual_seed(SEED)
        model = factory()
        shape = (1, 3, frames, size, size)
        randomize_batchnorm(model, shape, gen)
        return model, (torch.randn(batch, *shape[1:], generator=gen),), ["input"], ["logits"], 13
    return build


def bert(layers, hidden, heads, seq, vocab, batch=1):
    def build(gen):
        torch.manual_seed(SEED)
        model = BertEncoder(vocab, seq, hidden, layers, heads, 4 * hidden).eval()
        return (model, bert_inputs(vocab, seq, gen, batch), ["input_ids", "attention_mask"],
                ["last_hidden_state", "pooled"], 13)
    return build


def decoder(layers, hidden, heads, seq, vocab, batch=1):
    def build(gen):
        torch.manual_seed(SEED)
        model = Decoder(vocab, seq, hidden, layers, heads)
        randomize_norm_scales(model, gen)
        ids = torch.randint(0, vocab, (batch, seq), generator=gen)
        return model.eval(), (ids,), ["input_ids"], ["logits"], 13
    return build


def vit_small():
    """ViT-S/16 (12 layers, width 384, 6 heads): torchvision's VisionTransformer, whose
    classifier starts at zero; drawn instead so the logits are not."""
    model = torchvision.models.VisionTransformer(image_size=224, patch_size=16, num_layers=12, num_heads=6,
                                                 hidden_dim=384, mlp_dim=1536)
    nn.init.normal_(model.heads.head.weight, std=0.05)
    return model


class SegmentationOut(torch.nn.Module):
    """A torchvision segmentation model's "out" map (its forward returns a dict)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def segmentation(factory):
    return lambda: SegmentationOut(factory(weights=None, weights_backbone=None))


def recurrent(name, batch=1):
    """tests/models/make_rnn_models.py's LSTM / GRU, with its weights (U(-0.3, 0.3)), at
    `batch` sequences (the tests' batch of 3 replaced)."""
    def build(gen):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
        import make_rnn_models
        factory, input_shape, output_names = make_rnn_models.MODELS[name]
        axis = input_shape.index(make_rnn_models.BATCH)  # sequence-major LSTM: 1; batch_first GRU: 0
        input_shape = input_shape[:axis] + (batch,) + input_shape[axis + 1:]
        model = factory().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.rand(p.shape, generator=gen) * 0.6 - 0.3)
        return model, (torch.randn(input_shape, generator=gen),), ["x"], output_names, 14
    return build


def transformer_dynamic(batch, seq, width=256):
    """A 2-layer TransformerEncoder exported with batch and sequence known only at run time
    (dynamic axes); its sample input is batch x seq."""
    def build(gen):
        torch.manual_seed(SEED)
        layer = torch.nn.TransformerEncoderLayer(d_model=width, nhead=4, dim_feedforward=4 * width,
                                                 batch_first=True, dropout=0.0)
        model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
        axes = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
        return model, (torch.randn(batch, seq, width, generator=gen),), ["x"], ["y"], 14, axes
    return build


class DetectionOut(torch.nn.Module):
    """A torchvision detector's detections for its one image as a tuple (its forward
    returns a list of dicts): boxes [N,4], scores [N], labels [N], N known at run time."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        detections = self.model(x)[0]
        return detections["boxes"], detections["scores"], detections["labels"]


class DetectionBatchOut(torch.nn.Module):
    """A torchvision detector's detections for every image of a batch, one after the other:
    boxes [N,4], scores [N], labels [N], and each detection's image [N]."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        detections = self.model(x)
        image = [torch.full_like(d["labels"], i) for i, d in enumerate(detections)]
        return (torch.cat([d["boxes"] for d in detections]), torch.cat([d["scores"] for d in detections]),
                torch.cat([d["labels"] for d in detections]), torch.cat(image))


def detection(factory, size=320, batch=1):
    """Issue 21's detectors on `batch` [3, size, size] images in [0, 1] (they normalise and
    resize them themselves), exported at opset 11 as torchvision's own ONNX tests do. The
    export unrolls the per-image postprocessing: SSDlite is 3,209 nodes at one image and
    17,705 at eight."""
    def build(gen):
        torch.manual_seed(SEED)
        model = factory()
        randomize_batchnorm(model, (1, 3, size, size), gen, bn_only=True)
        images = torch.rand(batch, 3, size, size, generator=gen)
        if batch == 1:
            return DetectionOut(model), (images,), ["images"], ["boxes", "scores", "labels"], 11
        return (DetectionBatchOut(model), (images,), ["images"], ["boxes", "scores", "labels", "image"], 11)
    return build


DETECTION = torchvision.models.detection
BERT_BASE = dict(layers=12, hidden=768, heads=12, seq=128, vocab=30522)
GPT = dict(layers=6, hidden=512, heads=8, seq=128, vocab=16000)
# The bench set with a batch dimension: NAME at batch 1 and NAME_b8 at batch 8, the same
# weights (fixed seeds); only the input grows.
BATCHED = {
    "resnet50": lambda b: cnn(lambda: torchvision.models.resnet50(), batch=b),
    "mobilenet_v2": lambda b: cnn(lambda: torchvision.models.mobilenet_v2(), batch=b),
    "squeezenet1_1": lambda b: cnn(lambda: torchvision.models.squeezenet1_1(), batch=b),
    "efficientnet_b0": lambda b: cnn(lambda: torchvision.models.efficientnet_b0(), batch=b),
    "bert_base": lambda b: bert(**BERT_BASE, batch=b),
    # Issue 21's families at sizes the test suite can afford.
    "vgg11": lambda b: cnn(lambda: torchvision.models.vgg11(), size=224, batch=b),
    "resnext50_32x4d": lambda b: cnn(lambda: torchvision.models.resnext50_32x4d(), size=96, batch=b),
    "mobilenet_v3_small": lambda b: cnn(lambda: torchvision.models.mobilenet_v3_small(), size=128, batch=b),
    "efficientnet_v2_s": lambda b: cnn(lambda: torchvision.models.efficientnet_v2_s(), size=128, batch=b),
    "swin_t": lambda b: cnn(lambda: torchvision.models.swin_t(), size=224, batch=b),
    "r3d_18": lambda b: video(lambda: torchvision.models.video.r3d_18(), frames=8, size=56, batch=b),
    # Bilinear Resize (align_corners=False) to sizes computed from Shape: folded at compile time.
    "lraspp_mobilenet_v3": lambda b: cnn(segmentation(torchvision.models.segmentation.lraspp_mobilenet_v3_large),
                                         size=160, batch=b),
    "deeplabv3_mobilenet_v3": lambda b: cnn(
        segmentation(torchvision.models.segmentation.deeplabv3_mobilenet_v3_large), size=160, batch=b),
    # Issue 22's families: large-kernel depthwise blocks with LayerNorm and GELU, inception
    # branches, grouped convolutions with squeeze-and-excitation, a plain vision transformer,
    # a decoder-only transformer.
    "convnext_tiny": lambda b: cnn(lambda: torchvision.models.convnext_tiny(), size=160, batch=b, norms=True),
    "googlenet": lambda b: cnn(lambda: torchvision.models.googlenet(aux_logits=False, init_weights=True),
                               size=224, batch=b),
    "regnet_y_400mf": lambda b: cnn(lambda: torchvision.models.regnet_y_400mf(), size=224, batch=b),
    "vit_s16": lambda b: cnn(vit_small, size=224, batch=b, norms=True),
    "gpt_decoder": lambda b: decoder(**GPT, batch=b),
    # Issue 21's small and recurrent models, and a transformer whose batch and sequence are
    # known only at run time (one export per sample size; the model is the same).
    "bert_tiny": lambda b: bert(layers=2, hidden=128, heads=2, seq=32, vocab=1000, batch=b),
    "lstm2": lambda b: recurrent("lstm2", b),
    "gru2_bidirectional": lambda b: recurrent("gru2_bidirectional", b),
    "transformer_dyn": lambda b: transformer_dynamic(batch=b, seq=128),
    # Random weights score every box low: keep them all (score threshold 0) so that the
    # outputs are not empty.
    "ssdlite320_mobilenet_v3_large": lambda b: detection(
        lambda: DETECTION.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, score_thresh=0.0),
        batch=b),
    "fasterrcnn_mobilenet_v3_large_320_fpn": lambda b: detection(
        lambda: DETECTION.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                                box_score_thresh=0.0), batch=b),
}
MODELS = {
    **{name: build(1) for name, build in BATCHED.items()},
    **{name + "_b8": build(8) for name, build in BATCHED.items()},
    "resnet18_tiny": cnn(lambda: torchvision.models.resnet18(num_classes=10), size=64),
}


def save_tensor(array, name, path):
    proto = numpy_helper.from_array(np.ascontiguousarray(array), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def export(name, out_dir, opset_override):
    gen = torch.Generator().manual_seed(SEED)
    model, inputs, input_names, output_names, opset, *axes = MODELS[name](gen)
    opset = opset_override or opset
    with torch.no_grad():
        outputs = model(*inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    for out_name, out in zip(output_names, outputs):
        scale = float(out.abs().max()) if out.numel() else 0.0
        if not math.isfinite(scale) or scale < 1e-2:
            sys.exit(f"{name}: reference output {out_name} is degenerate (max |y| = {scale:g}); "
                     "refusing to write a model any comparison would pass")
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(model, inputs, path, input_names=input_names, output_names=output_names,
                      opset_version=opset, do_constant_folding=True, dynamic_axes=axes[0] if axes else None)
    for i, (in_name, t) in enumerate(zip(input_names, inputs)):
        save_tensor(t.numpy(), in_name, os.path.join(out_dir, f"{name}.input_{i}.pb"))
    for i, (out_name, t) in enumerate(zip(output_names, outputs)):
        save_tensor(t.numpy(), out_name, os.path.join(out_dir, f"{name}.output_{i}.pb"))
    scales = ", ".join(f"{n} max|y|={float(t.abs().max()):.3g}" for n, t in zip(output_names, outputs))
    print(f"{name}: {path} (opset {opset}; {scales})", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--only", help="comma-separated subset of: " + ", ".join(MODELS))
    parser.add_argument("--opset", type=int, default=0, help="override the export opset (13+)")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(MODELS)
    for n in names:
        if n not in MODELS:
            sys.exit(f"unknown model '{n}'; known: {', '.join(MODELS)}")
    if args.opset and args.opset < 13:
        sys.exit("--opset must be 13 or later")
    os.makedirs(args.out_dir, exist_ok=True)
    torch.set_num_threads(2)
    for n in names:
        export(n, args.out_dir, args.opset)


if __name__ == "__main__":
    main()
