#!/usr/bin/python3
"""Real accuracy of int8 post-training quantization: trains a small CNN on scikit-learn's
8x8 digits (1797 images; Debian's python3-sklearn), exports it to ONNX, compiles it with
kiln at fp32 and at int8 (calibrated on a held-out split), runs both artifacts on the
test split and checks that int8 test accuracy is at most 1 point below fp32's.

  digits_int8.py KILN [--arch small|resnet50] [--method minmax|percentile|entropy]
                 [--json OUT.json] [--min-snr DB] [--prune-channels R [--max-pruned-drop POINTS]]

--arch resnet50 trains torchvision's ResNet-50 (10 classes) instead, on the digits scaled
to 32 x 32 with 3 channels (8 epochs, about 3 minutes on 2 cores): a trained ResNet-50 for
the int8 output SNR, which a random-weight one cannot measure (bench/int8.sh's ResNet-50
turns 1 % input noise into 18.2 dB: bench/int8_sensitivity.py). --min-snr fails below
that logit SNR.

With --prune-channels it also compiles an fp32 build with that structured pruning ratio
(no fine-tuning) and reports its test accuracy and parameters/FLOPs before and after.

Splits (seeded): 600 test images, 200 calibration images, 997 training images. The model
is compiled for batches of 100, so calibration is 2 samples of 100 images and the test
split 6 batches. Prints one JSON line with the figures."""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
import torchvision
from onnx import numpy_helper
from sklearn.datasets import load_digits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from int8_sensitivity import fake_quant_weights, snr_db  # noqa: E402

BATCH = 100


class DigitsNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
            torch.nn.Conv2d(64, 64, 1), torch.nn.ReLU())
        self.classifier = torch.nn.Linear(64 * 2 * 2, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def write_tensor(path, array, name="input"):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kiln")
    parser.add_argument("--arch", choices=["small", "resnet50"], default="small")
    parser.add_argument("--method", default="minmax")
    parser.add_argument("--min-snr", type=float, default=None, help="fail if the int8 logits' SNR against fp32 is below this (dB)")
    parser.add_argument("--json")
    parser.add_argument("--prune-channels", type=float, default=0.0,
                        help="also compile an fp32 build with this channel pruning ratio and report its accuracy")
    parser.add_argument("--max-pruned-drop", type=float, default=100.0, help="points the pruned build may lose")
    args = parser.parse_args()

    torch.manual_seed(0)
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    if args.arch == "resnet50":
        # ResNet-50 halves the image five times: 32 x 32 reaches layer4 at 1 x 1.
        images = torch.nn.functional.interpolate(torch.from_numpy(images), size=32, mode="bilinear",
                                                 align_corners=False).repeat(1, 3, 1, 1).numpy()
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    test, calibration, train = order[:600], order[600:800], order[800:]

    if args.arch == "resnet50":
        model, lr, epochs = torchvision.models.resnet50(num_classes=10), 1e-3, 8
    else:
        model, lr, epochs = DigitsNet(), 3e-3, 30
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    x_train, y_train = torch.from_numpy(images[train]), torch.from_numpy(labels[train])
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(train))
        for i in range(0, len(train), 64):
            idx = perm[i:i + 64]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        x_test = torch.from_numpy(images[test])
        reference = model(x_test)
        torch_accuracy = float((reference.argmax(1).numpy() == labels[test]).mean())
        # How sensitive the trained network is, in PyTorch (as bench/int8_sensitivity.py
        # measures the random bench models): 1 % input noise, and s8 weights alone.
        noise = torch.Generator().manual_seed(7)
        sensitivity = {"torch_input_noise_1pct_snr_db": snr_db(reference, model(x_test + 0.01 * x_test.std() * torch.randn(x_test.shape, generator=noise)))}
        rounded = copy.deepcopy(model)
        fake_quant_weights(rounded)
        sensitivity["torch_s8_weights_snr_db"] = snr_db(reference, rounded(x_test))

    with tempfile.TemporaryDirectory() as work:
        onnx_path = os.path.join(work, "digits.onnx")
        torch.onnx.export(model, torch.zeros(BATCH, *images.shape[1:]), onnx_path, input_names=["input"], output_names=["logits"],
                          opset_version=13)
        for k in range(len(calibration) // BATCH):
            os.makedirs(os.path.join(work, "calibration", f"sample_{k}"))
            write_tensor(os.path.join(work, "calibration", f"sample_{k}", "input_0.pb"), images[calibration[k * BATCH:(k + 1) * BATCH]])
        subprocess.run([args.kiln, "compile", onnx_path, "-o", os.path.join(work, "fp32.so")], check=True)
        subprocess.run([args.kiln, "compile", onnx_path, "-o", os.path.join(work, "int8.so"), "--precision", "int8",
                        "--calibration", os.path.join(work, "calibration"), "--calibration-method", args.method,
                        "--report", os.path.join(work, "report.json")], check=True)
        with open(os.path.join(work, "report.json")) as f:
            quantization = json.load(f)["quantization"]
        predictions = {"fp32": [], "int8": []}
        logits = {"fp32": [], "int8": []}
        pruning = None
        if args.prune_channels > 0:
            subprocess.run([args.kiln, "compile", onnx_path, "-o", os.path.join(work, "pruned.so"), "--prune-channels",
                            str(args.prune_channels), "--report", os.path.join(work, "pruned.json")], check=True)
            with open(os.path.join(work, "pruned.json")) as f:
                pruning = json.load(f)["pruning"]
            predictions["pruned"], logits["pruned"] = [], []
        for b in range(len(test) // BATCH):
            batch_path = os.path.join(work, f"test_{b}.pb")
            write_tensor(batch_path, images[test[b * BATCH:(b + 1) * BATCH]])
            for precision in predictions:
                out = os.path.join(work, f"out_{precision}_{b}")
                subprocess.run([args.kiln, "run", os.path.join(work, f"{precision}.so"), "--input", f"input={batch_path}",
                                "--output-dir", out], check=True)
                y = read_tensor(os.path.join(out, "output_0.pb"))
                logits[precision].append(y)
                predictions[precision].extend(y.argmax(1).tolist())
    accuracy = {p: float((np.array(v) == labels[test]).mean()) for p, v in predictions.items()}
    fp32, int8 = np.concatenate(logits["fp32"]), np.concatenate(logits["int8"])
    logit_snr = snr_db(fp32, int8)
    result = {"torch_test_accuracy": torch_accuracy, "fp32_test_accuracy": accuracy["fp32"], "int8_test_accuracy": accuracy["int8"],
              "top1_drop_points": 100 * (accuracy["fp32"] - accuracy["int8"]),
              "top1_agreement": float((np.array(predictions["fp32"]) == np.array(predictions["int8"])).mean()),
              "logit_snr_db": logit_snr, "arch": args.arch, "method": args.method, "quantized_nodes": quantization["quantized_nodes"],
              "kept_float": quantization["kept_float"], "test_images": len(test), "calibration_images": len(calibration),
              **sensitivity}
    if pruning is not None:
        result.update({"prune_channels": args.prune_channels, "pruned_test_accuracy": accuracy["pruned"],
                       "pruned_drop_points": 100 * (accuracy["fp32"] - accuracy["pruned"]),
                       "parameters": [pruning["before"]["parameters"], pruning["after"]["parameters"]],
                       "mflops": [pruning["before"]["flops"] / 1e6, pruning["after"]["flops"] / 1e6]})
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    # The fp32 artifact is the trained model; int8 may lose at most 1 point of it.
    assert accuracy["fp32"] >= 0.9, f"training did not converge: fp32 test accuracy {accuracy['fp32']}"
    assert abs(accuracy["fp32"] - torch_accuracy) < 0.005, (accuracy["fp32"], torch_accuracy)
    assert result["top1_drop_points"] <= 1.0, result
    if args.min_snr is not None:
        assert logit_snr >= args.min_snr, f"int8 logit SNR {logit_snr:.1f} dB is below --min-snr {args.min_snr}"
    if pruning is not None:
        assert pruning["after"]["parameters"] < pruning["before"]["parameters"], pruning
        assert result["pruned_drop_points"] <= args.max_pruned_drop, result
    return 0


if __name__ == "__main__":
    sys.exit(main())
