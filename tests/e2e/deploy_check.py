#!/usr/bin/env python3
"""Checks the deployment files against the binaries they run (Docker and Kubernetes
cannot run here):

  - compose.yaml and the Kubernetes manifests parse, and every flag they pass to kilnd or
    kiln-worker is one that binary's --help lists; kilnd is started without local
    workers where workers are their own service;
  - the Dockerfile copies and runs scripts that exist, runs kilnd as a non-root user, and
    its build stage's package list (deploy/runtime-packages.sh) resolves every library
    the built binaries load;
  - promtool accepts deploy/prometheus.yml, which scrapes kilnd's metrics port;
  - Grafana provisioning points at the directory compose mounts the dashboards into.

    deploy_check.py --build BUILD_DIR --root SOURCE_DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import yaml


def check(condition, message):
    if not condition:
        print(f"deploy_check: FAIL: {message}")
        sys.exit(1)


def flags_in(args):
    return [a.split("=")[0] for a in args if isinstance(a, str) and a.startswith("--")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    deploy = os.path.join(args.root, "deploy")
    kilnd = os.path.join(args.build, "server", "kilnd")
    worker = os.path.join(args.build, "worker", "kiln-worker")
    help_text = {
        "kilnd": subprocess.run([kilnd, "--help"], capture_output=True, text=True, check=True).stdout,
        "kiln-worker": subprocess.run([worker, "--help"], capture_output=True, text=True, check=True).stdout,
    }

    def check_flags(binary, argv, where):
        for flag in flags_in(argv):
            check(re.search(rf"(^|\s){re.escape(flag)}(\s|$)", help_text[binary], re.M),
                  f"{where}: {binary} has no flag {flag}")

    # compose.yaml
    compose = yaml.safe_load(open(os.path.join(deploy, "compose.yaml")))
    services = compose["services"]
    for name in ("kilnd", "worker", "prometheus", "grafana"):
        check(name in services, f"compose.yaml has a {name} service")
    check_flags("kilnd", services["kilnd"]["command"], "compose kilnd")
    check(services["kilnd"]["command"][services["kilnd"]["command"].index("--workers") + 1] == "0",
          "compose: kilnd starts no local workers (the worker service does the work)")
    check(services["worker"]["entrypoint"] == ["kiln-worker"], "compose worker runs kiln-worker")
    check_flags("kiln-worker", services["worker"]["command"], "compose worker")
    check("kilnd:50051" in services["worker"]["command"], "compose workers reach kilnd by service name")
    check(os.path.exists(os.path.join(deploy, services["kilnd"]["build"]["context"], services["kilnd"]["build"]["dockerfile"])),
          "compose builds the Dockerfile")
    mounts = {m.split(":")[1]: m.split(":")[0] for m in services["grafana"]["volumes"]}
    for source in list(mounts.values()) + [services["prometheus"]["volumes"][0].split(":")[0]]:
        check(os.path.exists(os.path.join(deploy, source)), f"compose mounts {source}, which exists")

    # Grafana provisioning
    provider = yaml.safe_load(open(os.path.join(deploy, "grafana", "provisioning", "dashboards", "kiln.yaml")))
    check(provider["providers"][0]["options"]["path"] in mounts, "Grafana loads dashboards from where compose mounts them")
    datasource = yaml.safe_load(open(os.path.join(deploy, "grafana", "provisioning", "datasources", "prometheus.yaml")))
    check(datasource["datasources"][0]["url"].startswith("http://prometheus:"), "Grafana reads the compose Prometheus")

    # Kubernetes
    for path in ("kilnd.yaml", "worker.yaml"):
        for doc in yaml.safe_load_all(open(os.path.join(deploy, "k8s", path))):
            if doc["kind"] not in ("StatefulSet", "Deployment"):
                continue
            pod = doc["spec"]["template"]["spec"]
            check(pod["securityContext"]["runAsNonRoot"], f"k8s {path}: runs as non-root")
            for container in pod["containers"]:
                binary = (container.get("command") or ["kilnd"])[0]
                check(binary in help_text, f"k8s {path}: runs {binary}")
                check_flags(binary, container.get("args", []), f"k8s {path}")
                if binary == "kilnd":
                    check(container["readinessProbe"].get("grpc", {}).get("port") == 50051, "kilnd probed by gRPC health")

    # Dockerfile
    dockerfile = open(os.path.join(args.root, "Dockerfile")).read()
    check(dockerfile.count("FROM debian:12") >= 2, "multi-stage, Debian 12")
    for script in re.findall(r"bash (deploy/[\w./-]+\.sh)", dockerfile):
        check(os.path.exists(os.path.join(args.root, script)), f"Dockerfile runs {script}, which exists")
    user = re.findall(r"^USER (\S+)", dockerfile, re.M)
    check(user and not user[-1].startswith(("root", "0")), "the image runs as a non-root user")
    cmd = re.search(r"^CMD (\[.*\])", dockerfile, re.M)
    check(cmd, "Dockerfile has a CMD")
    check_flags("kilnd", yaml.safe_load(cmd.group(1)), "Dockerfile CMD")
    packages = subprocess.run(["bash", os.path.join(deploy, "runtime-packages.sh"), kilnd, worker,
                               os.path.join(args.build, "clients", "kiln")], capture_output=True, text=True)
    check(packages.returncode == 0, f"runtime-packages.sh: {packages.stderr}")
    listed = packages.stdout.split()
    for must in ("libgrpc++1.51", "libllvm19", "libsqlite3-0", "libprometheus-cpp-pull1.0"):
        check(must in listed, f"runtime packages include {must}: {listed}")
    check(not any(p.endswith("-dev") for p in listed), f"no -dev package at run time: {listed}")

    # Prometheus
    prometheus_config = yaml.safe_load(open(os.path.join(deploy, "prometheus.yml")))
    targets = [t for job in prometheus_config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    check("kilnd:9464" in targets, "prometheus.yml scrapes kilnd:9464")
    promtool = shutil.which("promtool")
    check(promtool, "promtool (Debian prometheus package) is installed")
    result = subprocess.run([promtool, "check", "config", os.path.join(deploy, "prometheus.yml")], capture_output=True, text=True)
    check(result.returncode == 0, f"promtool check config: {result.stdout}{result.stderr}")
    print(f"deploy_check: ok ({len(listed)} runtime packages)")


if __name__ == "__main__":
    main()
