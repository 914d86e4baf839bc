#!/usr/bin/env python3
"""A CI/MLOps pipeline step: compile a model on a Kiln server and gate on its accuracy.

    gate_on_report.py MODEL.onnx --server ADDR [--target T] [--atol A --rtol R]
                      [--inputs FILE.pb ...] [--min-top1 0.99] [--output DIR]

Exit status 0 when the job succeeds and the report's verdict passes (and every
classifier output's top-1 agreement is at least --min-top1); 1 otherwise, with the
reason on stderr. Writes artifact.so and report.json to --output when given.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kiln_client import KilnClient, KilnError  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--server", default=os.environ.get("KILN_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--target", default="host")
    parser.add_argument("--atol", type=float)
    parser.add_argument("--rtol", type=float)
    parser.add_argument("--inputs", nargs="*")
    parser.add_argument("--min-top1", type=float, default=0.0)
    parser.add_argument("--output")
    args = parser.parse_args()

    client = KilnClient(args.server)
    try:
        job = client.submit(args.model, target=args.target, atol=args.atol, rtol=args.rtol, inputs=args.inputs,
                            labels={"pipeline": "gate_on_report"})
        print(f"job {job.id}: {client.state_name(job.state)}", file=sys.stderr)
        job = client.wait(job.id, on_event=lambda e: print(f"  {client.state_name(e.state)} {e.phase} "
                                                           f"{e.progress:.0%}", file=sys.stderr))
    except KilnError as error:
        print(f"gate: {error}", file=sys.stderr)
        return 1
    if job.state != client.SUCCEEDED:
        print(f"gate: job {job.id} {client.state_name(job.state)}: {job.error}", file=sys.stderr)
        return 1
    report = client.report(job)
    failures = []
    if not report["verdict"]["passed"]:
        failures.append(report["verdict"]["reason"])
    for output in report["outputs"]:
        top1 = output["top1_agreement"] if output["has_topk"] else None  # classifier-shaped outputs only
        if top1 is not None and top1 < args.min_top1:
            failures.append(f"output {output['name']}: top-1 agreement {top1:.3f} < {args.min_top1}")
        print(f"  {output['name']}: max_abs {output['max_abs_error']:.3g}, snr {output['snr_db']:.1f} dB", file=sys.stderr)
    if args.output:
        os.makedirs(args.output, exist_ok=True)
        client.download_to(job.result.artifact, os.path.join(args.output, "artifact.so"))
        client.download_to(job.result.report, os.path.join(args.output, "report.json"))
    print(f"artifact {job.result.artifact.sha256}/{job.result.artifact.size_bytes}")
    if failures:
        for failure in failures:
            print(f"gate: FAIL: {failure}", file=sys.stderr)
        return 1
    print("gate: PASS", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
