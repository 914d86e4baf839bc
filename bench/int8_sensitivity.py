#!/usr/bin/python3
"""How much SNR an 8-bit scheme can keep on a bench model, measured in PyTorch itself.

  int8_sensitivity.py [MODEL ...]   (default: resnet50; names as in make_models.py)

Rebuilds the seeded model bench/make_models.py exports and runs its bench input through
perturbed copies, printing the output's SNR against the unperturbed output (dB) for:
Gaussian input noise of 0.3 % and 1 % of the input's std; weights alone rounded to s8 per
output channel (symmetric, as Kiln's quantize pass does; BatchNorm scales channels, so
rounding before folding it is the same); every Conv/Linear input alone rounded to u8 per
tensor over its own min/max; and both. On a random-weight network these say whether a
low int8 SNR is the quantizer's or the network's: bench/RESULTS.md records them."""
import copy
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_models  # noqa: E402


def snr_db(ref, y):
    return float(10 * np.log10(float((ref ** 2).sum()) / float(((ref - y) ** 2).sum())))


def fake_quant_weights(model):
    for mod in model.modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            w = mod.weight
            scale = (w.abs().flatten(1).max(1).values / 127).clamp_min(1e-30).view(-1, *([1] * (w.dim() - 1)))
            mod.weight.copy_(torch.round(w / scale).clamp(-127, 127) * scale)


def fake_quant_inputs(model):
    def hook(_, inputs):
        t = inputs[0]
        lo, hi = min(float(t.min()), 0.0), max(float(t.max()), 0.0)
        if hi == lo:
            return None
        scale = (hi - lo) / 255
        zero = round(-lo / scale)
        return ((torch.clamp(torch.round(t / scale) + zero, 0, 255) - zero) * scale,)
    for mod in model.modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            mod.register_forward_pre_hook(hook)


def main():
    torch.set_num_threads(1)
    names = sys.argv[1:] or ["resnet50"]
    print("| model | input noise 0.3 % | input noise 1 % | s8 weights | u8 inputs of Conv/Linear | both |")
    print("|---|---|---|---|---|---|")
    for name in names:
        gen = torch.Generator().manual_seed(make_models.SEED)
        model, inputs, *_ = make_models.MODELS[name](gen)
        x = inputs[0]
        noise = torch.Generator().manual_seed(7)
        with torch.no_grad():
            ref = model(x)
            row = [snr_db(ref, model(x + eps * x.std() * torch.randn(x.shape, generator=noise))) for eps in (0.003, 0.01)]
            weights = copy.deepcopy(model)
            fake_quant_weights(weights)
            row.append(snr_db(ref, weights(x)))
            acts = copy.deepcopy(model)
            fake_quant_inputs(acts)
            row.append(snr_db(ref, acts(x)))
            fake_quant_inputs(weights)
            row.append(snr_db(ref, weights(x)))
        print(f"| {name} | " + " | ".join(f"{v:.1f} dB" for v in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
