#!/usr/bin/env python3
"""End-to-end tests of the Kiln service: a real kilnd and real kiln-worker processes on
loopback, driven through the kiln CLI and the Python client package.

    service_e2e.py --build BUILD_DIR --root SOURCE_DIR SCENARIO

Each scenario starts its own kilnd in a fresh data directory. See SCENARIOS at the end.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ARGS = None


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def wait_until(predicate, timeout_s, what):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class Kilnd:
    """A kilnd process in `data_dir` on a free port, with its local workers."""

    def __init__(self, data_dir, *flags, workers=1, env=None):
        self.data_dir = data_dir
        self.flags = list(flags)
        self.workers = workers
        self.env = env  # None: this process's environment
        self.process = None
        self.start()

    def start(self):
        for name in ("kilnd.addr", "metrics.addr"):
            try:
                os.unlink(os.path.join(self.data_dir, name))
            except FileNotFoundError:
                pass
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(self.data_dir, "kilnd.log")
        self.log_file = open(self.log_path, "ab")
        command = [os.path.join(ARGS.build, "server", "kilnd"), "--listen", "127.0.0.1:0", "--data-dir", self.data_dir,
                   "--workers", str(self.workers), "--metrics-listen", "127.0.0.1:0",
                   "--worker-binary", os.path.join(ARGS.build, "worker", "kiln-worker")] + self.flags
        self.process = subprocess.Popen(command, stdout=self.log_file, stderr=subprocess.STDOUT, env=self.env)
        addr_file = os.path.join(self.data_dir, "kilnd.addr")
        wait_until(lambda: os.path.exists(addr_file) and open(addr_file).read().strip(), 20, "kilnd to listen")
        self.address = open(addr_file).read().strip()
        self.metrics_address = open(os.path.join(self.data_dir, "metrics.addr")).read().strip()
        from kiln_client import KilnClient
        self.client = KilnClient(self.address)

    def kill9(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.client.close()

    def metrics(self):
        return urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10).read().decode()

    def metric(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.metrics().splitlines():
            match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
            if not match or match.group(1) != name:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(match.group(3))
        return total

    def log_text(self):
        return open(self.log_path, errors="replace").read()


def kiln(*args, check_rc=True, timeout=300):
    result = subprocess.run([os.path.join(ARGS.build, "clients", "kiln")] + [str(a) for a in args],
                            capture_output=True, text=True, timeout=timeout)
    if check_rc and result.returncode != 0:
        raise AssertionError(f"kiln {' '.join(map(str, args))} exited {result.returncode}\n"
                             f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def make_model(work, kind, name, **options):
    path = os.path.join(work, name)
    command = [sys.executable, os.path.join(ARGS.root, "tests", "e2e", "make_test_models.py"), kind, path]
    for key, value in options.items():
        command += [f"--{key}", str(value)]
    subprocess.run(command, check=True)
    return path


def slow_model(work, seed=0):
    # About 3-5 s of compile (and over 1 s of CPU) on this machine: the chain's length drives
    # the passes and the glue codegen (a kernel call per layer).
    return make_model(work, "chain", f"slow{seed}.onnx", layers=4000, width=16, seed=seed)


def sample_model(work):
    path = os.path.join(work, "sample.onnx")
    subprocess.run([sys.executable, os.path.join(ARGS.root, "clients", "examples", "make_sample_model.py"), path], check=True)
    return path


def job_processes():
    """PIDs of job processes (kiln-worker --run-job) on this machine."""
    out = subprocess.run(["pgrep", "-f", "kiln-worker --run-job"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def worker_pids(kilnd):
    out = subprocess.run(["pgrep", "-P", str(kilnd.process.pid), "-f", "kiln-worker"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def sha256_file(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# ----------------------------------------------------------------------------- scenarios

def scenario_submit_download(work):
    """Upload + submit + wait + download with digest check, through the CLI and Python."""
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        model = sample_model(work)
        inputs = os.path.join(work, "inputs")
        os.makedirs(inputs)
        shutil.copy(os.path.join(work, "sample.input.pb"), os.path.join(inputs, "input.pb"))
        out = os.path.join(work, "out")
        result = kiln("submit", model, "--server", server.address, "--inputs", inputs, "--atol", "1e-4", "--rtol", "1e-3",
                      "--wait", "--output", out, "--fail-on-accuracy", "--label", "suite=e2e")
        log(result.stdout)
        check("uploading model" in result.stderr, "the first submit uploads the model")
        match = re.search(r"^artifact: ([0-9a-f]{64})/(\d+)$", result.stdout, re.M)
        check(match, "submit prints the artifact digest")
        check(sha256_file(os.path.join(out, "artifact.so")) == match.group(1), "artifact.so matches the printed digest")
        check(os.path.getsize(os.path.join(out, "artifact.so")) == int(match.group(2)), "artifact size")
        report = json.load(open(os.path.join(out, "report.json")))
        check(report["schema"] == "kiln.accuracy-report" and report["schema_version"] == 2, "report schema")
        check(report["verdict"]["passed"], f"verdict: {report['verdict']}")
        check(report["inputs"]["source"] == "uploaded", "the uploaded input set was used")
        output = report["outputs"][0]
        for key in ("max_abs_error", "mean_abs_error", "max_rel_error", "cosine_similarity", "snr_db",
                    "count_outside_tolerance", "top1_agreement", "top5_agreement"):
            check(key in output, f"report output has {key}")
        check(output["cosine_similarity"] > 0.9999 and output["snr_db"] > 60, f"accuracy figures: {output}")
        check(report["compile"]["passes"] and report["compile"]["memory_plan"]["arena_bytes"] >= 0, "compile stats")
        check(report["latency_ms"]["median"] > 0, "latency measured on the host")
        manifest = json.load(open(os.path.join(out, "manifest.json")))
        check((manifest["schema"], manifest["schema_version"]) == ("kiln.manifest", 2), "manifest")
        # The spec survives whole: the target's preset beside its resolution, the options asked for.
        spec = manifest["spec"]
        check(spec["target"]["preset"] == "host" and spec["target"]["cpu"] and spec["target"]["features"], spec["target"])
        check(spec["accuracy"]["atol"] == 1e-4 and spec["accuracy"]["input_set"]["sha256"], spec["accuracy"])
        check(report["target"] == spec["target"] and report["action_key"] == manifest["action_key"], "report target")
        # The artifact runs outside the service.
        kiln("run", os.path.join(out, "artifact.so"), "--input", f"input={os.path.join(inputs, 'input.pb')}",
             "--output-dir", os.path.join(work, "run"))
        # Second submit without --wait: the job id alone on the last line; state by API name.
        result = kiln("submit", model, "--server", server.address)
        check("already has the model" in result.stderr, "the second submit uploads nothing")
        job_id = result.stdout.strip().splitlines()[-1]
        check(re.fullmatch(r"job-[0-9a-f]{16}", job_id), f"job id on the last line: {result.stdout!r}")
        watched = kiln("watch", job_id, "--server", server.address)
        check("artifact: " in watched.stdout, "kiln watch follows the job to its end")
        shown = kiln("job", job_id, "--server", server.address).stdout
        check(shown.splitlines()[0] == "SUCCEEDED", f"kiln job shows SUCCEEDED: {shown}")
        # fetch by digest, verified.
        fetched = os.path.join(work, "fetched.so")
        kiln("fetch", f"{match.group(1)}/{match.group(2)}", "-o", fetched, "--server", server.address)
        check(sha256_file(fetched) == match.group(1), "fetch writes the artifact")
        listing = kiln("jobs", "--server", server.address, "--label", "suite=e2e").stdout
        check(listing.count("SUCCEEDED") == 1, f"jobs filtered by label: {listing}")
        # The Python client: resumable download from an offset, Lookup, paging.
        client = server.client
        job = client.get_job(job_id)
        whole = client.download(job.result.artifact)
        tail = client.download(job.result.artifact, offset=1000)
        check(tail == whole[1000:], "Download resumes from an offset")
        found = client.lookup(job.model, target="host")
        check(found.action_key == job.action_key and found.result.artifact.sha256 == job.result.artifact.sha256,
              "Lookup answers from the cache with the job's result")
        pages = client.list_jobs(page_size=1)
        check(len(pages) == 2, f"ListJobs pages through every job: {len(pages)}")


def scenario_cache_hit(work):
    """A resubmit is answered from the action cache at once, with no worker running."""
    data = os.path.join(work, "data")
    model = sample_model(work)
    with Kilnd(data, workers=1) as server:
        first = server.client.wait(server.client.submit(model).id)
        check(first.state == server.client.SUCCEEDED, f"first compile: {first.error}")
    with Kilnd(data, workers=0) as server:  # nobody could compile now
        start = time.time()
        job = server.client.submit(model)
        elapsed_ms = (time.time() - start) * 1000
        check(job.state == server.client.SUCCEEDED and job.cache_hit, f"born SUCCEEDED from the cache: {job}")
        check(job.attempts == 0, "no worker touched it")
        check(job.result.artifact.sha256 == first.result.artifact.sha256, "the same artifact")
        log(f"cache-hit Submit answered in {elapsed_ms:.1f} ms")
        check(server.metric("kiln_action_cache_lookups_total", result="hit") == 1, "hit counted")
        check(server.metric("kiln_jobs_submitted_total", outcome="cache_hit") == 1, "cache_hit outcome counted")
        # Lookup never compiles: a different tolerance is a different action, and is absent.
        try:
            server.client.lookup(first.model, atol=0.5, rtol=0.5)
            raise AssertionError("Lookup of an uncompiled action must be NOT_FOUND")
        except Exception as error:  # KilnError
            check(getattr(error, "code", None) is not None and error.code.name == "NOT_FOUND", str(error))
        check(server.client.list_jobs(state=server.client.QUEUED) == [], "Lookup queued nothing")


def scenario_coalesce(work):
    """Concurrent identical submits join one task: one compile, every caller sees it."""
    with Kilnd(os.path.join(work, "data"), workers=0) as server:
        model = open(sample_model(work), "rb").read()
        jobs, errors = [], []

        def submit():
            try:
                from kiln_client import KilnClient
                client = KilnClient(server.address)
                jobs.append(client.submit(model, labels={"who": threading.current_thread().name}))
            except Exception as error:  # noqa: BLE001
                errors.append(error)

        threads = [threading.Thread(target=submit, name=f"client{i}") for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not errors, f"submit errors: {errors}")
        check(len({j.action_key for j in jobs}) == 1, "one action key")
        check(len({j.id for j in jobs}) == 8, "every caller has its own job")
        check(server.metric("kiln_queue_depth") == 1 or wait_until(lambda: server.metric("kiln_queue_depth") == 1, 5, "depth"),
              "one task queued")
        check(server.metric("kiln_jobs_submitted_total", outcome="joined") == 7, "seven joined")
        # One worker, one job: it exits after a single compile.
        worker = subprocess.run([os.path.join(ARGS.build, "worker", "kiln-worker"), "--server", server.address, "--id",
                                 "coalesce-worker", "--once"], capture_output=True, text=True, timeout=120)
        check(worker.returncode == 0, worker.stderr)
        finished = [server.client.wait(j.id) for j in jobs]
        check(all(j.state == server.client.SUCCEEDED for j in finished), "all succeeded")
        check(len({j.result.artifact.sha256 for j in finished}) == 1, "all see the same artifact")
        check(sum(j.attempts for j in finished) == 8 and all(j.attempts == 1 for j in finished), "one compile attempt")


def scenario_cancel(work):
    """Cancelling a queued job, and a running one (its compile process is killed)."""
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        client = server.client
        job = client.submit(slow_model(work, seed=1))
        wait_until(lambda: client.get_job(job.id).phase in ("passes", "codegen"), 60, "the slow compile to run")
        check(job_processes(), "a job process runs")
        cancelled = client.cancel(job.id)
        check(client.state_name(cancelled.state) == "CANCELLED", f"cancel answers CANCELLED: {cancelled.state}")
        wait_until(lambda: not job_processes(), 10, "the compile process to be killed")
        wait_until(lambda: "stopped job" in server.log_text(), 5, "the worker to report the stop")
        time.sleep(1)
        check(client.get_job(job.id).state == client.CANCELLED, "stays cancelled")
        # The CLI: a job cancelled while queued (the worker is busy with another slow one).
        busy = client.submit(slow_model(work, seed=2))
        wait_until(lambda: client.get_job(busy.id).state == client.RUNNING, 30, "the worker to be busy")
        queued = kiln("submit", slow_model(work, seed=3), "--server", server.address).stdout.strip().splitlines()[-1]
        check(kiln("job", queued, "--server", server.address).stdout.startswith("QUEUED"), "queued behind the busy worker")
        check(kiln("cancel", queued, "--server", server.address).stdout.strip() == "CANCELLED", "kiln cancel")
        watched = kiln("watch", queued, "--server", server.address, check_rc=False)
        check(watched.returncode == 1, "watching a cancelled job exits 1")
        check(client.wait(busy.id).state == client.SUCCEEDED, "the other job is undisturbed")
        check(client.get_job(queued).attempts == 0, "the cancelled queued job never ran")


def scenario_worker_kill(work):
    """A worker killed mid-job loses its lease; the job is retried, then fails with the reason."""
    with Kilnd(os.path.join(work, "data"), "--lease-timeout-ms", "1500", "--max-attempts", "2", workers=1) as server:
        client = server.client
        job = client.submit(slow_model(work, seed=4))
        wait_until(lambda: client.get_job(job.id).phase in ("passes", "codegen"), 60, "the compile to run")
        victims = worker_pids(server)
        check(victims, "a local worker")
        os.kill(victims[0], signal.SIGKILL)
        log(f"killed worker {victims[0]}")
        done = client.wait(job.id)
        check(done.state == client.SUCCEEDED, f"retried and succeeded: {done.error}")
        check(done.attempts == 2, f"two attempts: {done.attempts}")
        check("restarting it" in server.log_text(), "kilnd restarted the worker")
        # Kill it on every attempt: the job fails with the reason after max-attempts.
        job = client.submit(slow_model(work, seed=5))
        for attempt in range(2):
            def running(n=attempt + 1):
                now = client.get_job(job.id)
                return now.state == client.RUNNING and now.attempts == n and now.phase in ("passes", "codegen")
            wait_until(running, 60, f"attempt {attempt + 1} to run")
            for pid in worker_pids(server):
                os.kill(pid, signal.SIGKILL)
        done = client.wait(job.id)
        check(done.state == client.FAILED, f"fails after two lost leases: {client.state_name(done.state)}")
        check("stopped heartbeating" in done.error and "attempt 2 of 2" in done.error, f"the reason: {done.error}")


def scenario_kilnd_kill(work):
    """kill -9 of kilnd with jobs queued and running, then restart: every job completes once."""
    data = os.path.join(work, "data")
    server = Kilnd(data, "--lease-timeout-ms", "2000", workers=1)
    client = server.client
    models = [slow_model(work, seed=10 + i) for i in range(3)]
    jobs = [client.submit(m) for m in models]
    wait_until(lambda: any(client.get_job(j.id).phase in ("passes", "codegen") for j in jobs), 60, "one running")
    states = [client.state_name(client.get_job(j.id).state) for j in jobs]
    log(f"states before kill -9: {states}")
    check("RUNNING" in states and "QUEUED" in states, f"running and queued jobs: {states}")
    server.kill9()
    wait_until(lambda: not job_processes(), 10, "workers and their job processes to die with kilnd")
    with Kilnd(data, "--lease-timeout-ms", "2000", workers=1) as server:
        check("requeued 1 job(s)" in server.log_text(), "the running job is requeued at once, not after its lease")
        second = subprocess.run([os.path.join(ARGS.build, "server", "kilnd"), "--data-dir", data, "--listen", "127.0.0.1:0",
                                 "--metrics-listen", "off", "--workers", "0"], capture_output=True, text=True, timeout=30)
        check(second.returncode == 1 and "in use by another kilnd" in second.stderr,
              f"a second kilnd on the same data dir is refused: {second.stderr}")
        client = server.client
        finished = [client.wait(j.id) for j in jobs]
        check(all(j.state == client.SUCCEEDED for j in finished), f"all succeed: {[j.error for j in finished]}")
        # The same model compiled again gives the same artifact: nothing ran to a different result.
        again = client.submit(models[0])
        check(again.cache_hit and again.result.artifact.sha256 == finished[0].result.artifact.sha256, "stable result")
        check(len(client.list_jobs()) == 4, "no job lost or duplicated")


def scenario_kilnd_kill_stress(work):
    """kill -9 of kilnd at several moments while jobs flow: every accepted job ends once,
    and all jobs for one model agree on one artifact."""
    import random
    rng = random.Random(1234)
    data = os.path.join(work, "data")
    flags = ("--lease-timeout-ms", "1500")
    models = [make_model(work, "classifier", f"k{i}.onnx", seed=300 + i) for i in range(4)]
    models += [slow_model(work, seed=30 + i) for i in range(2)]
    accepted = []  # (job id, model index)
    server = Kilnd(data, *flags, workers=2)
    for round_index in range(4):
        for _ in range(3):
            index = rng.randrange(len(models))
            accepted.append((server.client.submit(models[index]).id, index))
        delay = rng.uniform(0.2, 2.5)
        time.sleep(delay)
        states = [server.client.state_name(server.client.get_job(j).state) for j, _ in accepted]
        log(f"round {round_index}: kill -9 after {delay:.2f} s; states {states}")
        server.kill9()
        wait_until(lambda: not job_processes(), 10, "job processes to die with kilnd")
        server = Kilnd(data, *flags, workers=2)
    try:
        client = server.client
        finished = {j: client.wait(j, timeout_s=240) for j, _ in accepted}
        bad = {j: (client.state_name(job.state), job.error) for j, job in finished.items() if job.state != client.SUCCEEDED}
        check(not bad, f"every accepted job succeeds: {bad}")
        by_model = {}
        for job_id, index in accepted:
            by_model.setdefault(index, set()).add(finished[job_id].result.artifact.sha256)
        check(all(len(v) == 1 for v in by_model.values()), f"one artifact per model: {by_model}")
        check(len(client.list_jobs()) == len(accepted), "no job lost or duplicated")
        log(f"{len(accepted)} jobs over 4 kills: all succeeded; "
            f"attempts {sorted(finished[j].attempts for j, _ in accepted)}")
    finally:
        server.stop()


def scenario_corrupt_blob(work):
    """A corrupt blob on disk is detected, dropped and never served; resubmit recompiles."""
    data = os.path.join(work, "data")
    with Kilnd(data, workers=1) as server:
        client = server.client
        model = sample_model(work)
        job = client.wait(client.submit(model).id)
        artifact = job.result.artifact
        path = os.path.join(data, "cache", "sha256", artifact.sha256[:2], artifact.sha256[2:])
        with open(path, "r+b") as blob:
            blob.seek(artifact.size_bytes // 2)
            byte = blob.read(1)
            blob.seek(artifact.size_bytes // 2)
            blob.write(bytes([byte[0] ^ 0xFF]))
        try:
            client.download(artifact)
            raise AssertionError("a corrupt blob must not be served")
        except Exception as error:  # KilnError
            check(getattr(error, "code", None) is not None and error.code.name == "DATA_LOSS", str(error))
        check(not os.path.exists(path), "the corrupt blob was removed")
        check(server.metric("kiln_cache_corrupt_blobs_total") >= 1 or
              wait_until(lambda: server.metric("kiln_cache_corrupt_blobs_total") >= 1, 5, "metric"), "counted")
        fetch = kiln("fetch", f"{artifact.sha256}/{artifact.size_bytes}", "-o", os.path.join(work, "x.so"), "--server",
                     server.address, check_rc=False)
        check(fetch.returncode == 1 and "NOT_FOUND" in fetch.stderr, f"gone afterwards: {fetch.stderr}")
        again = client.wait(client.submit(model).id)
        check(not again.cache_hit and again.state == client.SUCCEEDED, "resubmit compiles again")
        check(client.download(again.result.artifact), "and serves a good artifact")


def scenario_eviction(work):
    """The cache stays within its size budget by LRU eviction; evicted results recompile."""
    # Each classifier's artifact is about 160 KB (the generic kernels it calls), so four
    # results do not fit in 500 KB.
    with Kilnd(os.path.join(work, "data"), "--cache-budget", "500K", workers=1) as server:
        client = server.client
        models = [make_model(work, "classifier", f"e{i}.onnx", seed=200 + i) for i in range(4)]
        jobs = [client.wait(client.submit(m).id) for m in models]
        check(all(j.state == client.SUCCEEDED for j in jobs), [j.error for j in jobs])
        log(f"cache bytes {server.metric('kiln_cache_bytes')}, blobs {server.metric('kiln_cache_blobs')}")
        wait_until(lambda: server.metric("kiln_cache_evictions_total") > 0, 10, "evictions")
        used = server.metric("kiln_cache_bytes")
        check(0 < used <= 500 * 1024, f"cache within budget: {used}")
        # The newest result is intact; the oldest was evicted, so its resubmit compiles again.
        check(client.download(jobs[-1].result.artifact), "the newest artifact is served")
        again = client.wait(client.submit(models[0]).id)
        check(again.state == client.SUCCEEDED and not again.cache_hit, "an evicted result compiles again")
        log(f"cache {used:.0f} bytes after {server.metric('kiln_cache_evictions_total'):.0f} evictions")


def scenario_bad_requests(work):
    """Wrong digest, oversize upload, garbage model, unknown target: right code, nothing disturbed."""
    from kiln_client import KilnError, digest_of, kiln_pb2, spec_pb2
    with Kilnd(os.path.join(work, "data"), "--max-upload", "4M", workers=1) as server:
        client = server.client
        model = open(sample_model(work), "rb").read()

        def code_of(call):
            try:
                call()
            except KilnError as error:
                log(f"  -> {error}")
                return error.code.name
            return "OK"

        wrong = digest_of(b"something else")
        wrong.size_bytes = len(model)
        check(code_of(lambda: client.upload(model, digest=wrong, check_missing=False)) == "INVALID_ARGUMENT", "wrong digest")
        big = os.urandom(5 << 20)  # over the 4 MiB limit; a compiled sample (2.1 MB) is under it
        check(code_of(lambda: client.upload(big)) == "RESOURCE_EXHAUSTED", "oversize upload")
        garbage = os.urandom(4096)
        check(code_of(lambda: client.submit(garbage)) == "INVALID_ARGUMENT", "garbage model")
        check(code_of(lambda: client.submit(model, target="pdp-11")) == "INVALID_ARGUMENT", "unknown target")
        missing = kiln_pb2.SubmitRequest(spec=spec_pb2.CompileSpec(model=digest_of(b"never uploaded")))
        check(code_of(lambda: client._call("Submit", missing)) == "FAILED_PRECONDITION", "model not uploaded")
        check(code_of(lambda: client.get_job("job-0000000000000000")) == "NOT_FOUND", "unknown job")
        bad_digest = digest_of(b"")
        bad_digest.sha256 = "xyz"
        check(code_of(lambda: client.download(bad_digest)) == "INVALID_ARGUMENT", "malformed digest")
        check(code_of(lambda: client.submit(model, atol=-1.0, rtol=0.0)) == "INVALID_ARGUMENT", "negative tolerance")
        tuned = spec_pb2.CompileSpec()
        tuned.tuning.enabled = True
        check(code_of(lambda: client.submit(model, spec=tuned)) == "INVALID_ARGUMENT", "the service does not tune")
        # A model the importer rejects fails its job with the importer's message.
        unsupported = make_model(work, "chain", "ok.onnx", layers=1, width=8)
        import onnx
        m = onnx.load(unsupported)
        m.graph.node[0].op_type = "NoSuchOp"
        broken = m.SerializeToString()
        failed = client.wait(client.submit(broken).id)
        check(failed.state == client.FAILED and "NoSuchOp" in failed.error, f"import error reported: {failed.error}")
        # The CLI shows the code and exits 1.
        result = kiln("submit", os.path.join(work, "sample.onnx"), "--server", server.address, "--target", "pdp-11",
                      check_rc=False)
        check(result.returncode == 1 and "INVALID_ARGUMENT" in result.stderr and "pdp-11" in result.stderr, result.stderr)
        # Nothing disturbed: a good job still runs and no blob from the bad uploads was kept.
        check(client.find_missing([digest_of(big), wrong]) != [], "rejected uploads left nothing")
        good = client.wait(client.submit(model).id)
        check(good.state == client.SUCCEEDED, "a good job afterwards")
        codes = server.metrics()
        check('code="INVALID_ARGUMENT"' in codes and 'code="RESOURCE_EXHAUSTED"' in codes, "RPC codes counted")


def scenario_unsupported_list(work):
    """A model with several unsupported constructs fails its job with all of them listed."""
    sys.path.insert(0, os.path.join(ARGS.root, "tests", "e2e"))
    from make_test_models import UNSUPPORTED_NODES
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        model = make_model(work, "unsupported", "unsupported.onnx")
        result = kiln("submit", model, "--server", server.address, "--wait", check_rc=False)
        log(result.stderr)
        check(result.returncode == 1, f"submit --wait of a failing job exits 1: {result.returncode}")
        job_id = re.search(r"job-[0-9a-f]{16}", result.stdout + result.stderr).group(0)
        job = server.client.get_job(job_id)
        check(job.state == server.client.FAILED, f"the job failed: {job.state}")
        check(f"{len(UNSUPPORTED_NODES)} constructs cannot be compiled:" in job.error, f"the error counts: {job.error}")
        for node, reason in UNSUPPORTED_NODES.items():
            line = next((l for l in job.error.splitlines() if f"node '{node}' (" in l), "")
            check(", opset 21): " in line and reason in line, f"the job's error lists {node}: {job.error}")
        shown = kiln("job", job_id, "--server", server.address, check_rc=False)
        check(all(f"node '{node}'" in shown.stdout + shown.stderr for node in UNSUPPORTED_NODES),
              f"kiln job shows every problem: {shown.stdout}{shown.stderr}")


def scenario_limits(work):
    """A job over its CPU-time or memory limit is killed and fails with that reason."""
    with Kilnd(os.path.join(work, "data"), "--job-cpu-seconds", "1", workers=1) as server:
        job = server.client.wait(server.client.submit(slow_model(work, seed=20)).id)
        check(job.state == server.client.FAILED and "CPU-time limit of 1 s" in job.error, f"cpu limit: {job.error}")
    with Kilnd(os.path.join(work, "data2"), "--job-memory", "400M", workers=1) as server:
        big = make_model(work, "chain", "big.onnx", layers=60, width=512, seed=21)
        job = server.client.wait(server.client.submit(big).id)
        check(job.state == server.client.FAILED and "memory limit of 400 MiB" in job.error, f"memory limit: {job.error}")
        small = server.client.wait(server.client.submit(sample_model(work)).id)
        check(small.state == server.client.SUCCEEDED, f"a small job fits the same limit: {small.error}")


def scenario_concurrent_clients(work):
    """50 concurrent clients submitting and downloading: zero errors."""
    with Kilnd(os.path.join(work, "data"), workers=2) as server:
        models = [open(make_model(work, "classifier", f"m{i}.onnx", seed=100 + i), "rb").read() for i in range(5)]
        errors, artifacts = [], {}
        lock = threading.Lock()

        def one_client(index):
            from kiln_client import KilnClient
            client = KilnClient(server.address)
            try:
                model = models[index % len(models)]
                job = client.wait(client.submit(model, labels={"client": str(index)}).id)
                if job.state != client.SUCCEEDED:
                    raise RuntimeError(f"client {index}: {client.state_name(job.state)} {job.error}")
                data = client.download(job.result.artifact)  # digest-checked
                report = client.report(job)
                if not report["verdict"]["passed"]:
                    raise RuntimeError(f"client {index}: verdict {report['verdict']}")
                with lock:
                    artifacts.setdefault(index % len(models), set()).add(hashlib.sha256(data).hexdigest())
            except Exception as error:  # noqa: BLE001
                with lock:
                    errors.append(f"client {index}: {error}")
            finally:
                client.close()

        start = time.time()
        threads = [threading.Thread(target=one_client, args=(i,)) for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        log(f"50 clients done in {time.time() - start:.1f} s")
        check(not errors, "\n".join(errors))
        check(all(len(v) == 1 for v in artifacts.values()) and len(artifacts) == 5, "one artifact per model")
        compiles = server.metric("kiln_jobs_submitted_total", outcome="queued")
        check(compiles == 5, f"five compiles for five models, the rest joined or hit the cache: {compiles}")


def scenario_health_reflection(work):
    """Standard gRPC health checking and server reflection answer."""
    import grpc
    with Kilnd(os.path.join(work, "data"), workers=0) as server:
        channel = grpc.insecure_channel(server.address)
        check_health = channel.unary_unary("/grpc.health.v1.Health/Check")
        # HealthCheckRequest{} serializes to b""; SERVING is status=1 (field 1, varint).
        check(check_health(b"", timeout=10) == b"\x08\x01", "health: SERVING")
        reflect = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        # ServerReflectionRequest{list_services: ""} = field 7, length-delimited, empty.
        replies = b"".join(reflect(iter([b"\x3a\x00"]), timeout=10))
        for service in (b"kiln.v1.Kiln", b"kiln.v1.Worker", b"grpc.health.v1.Health"):
            check(service in replies, f"reflection lists {service!r}")
        channel.close()


def scenario_dashboard(work):
    """Every metric a Grafana panel queries is one kilnd really exports."""
    dashboard_dir = os.path.join(ARGS.root, "deploy", "grafana", "dashboards")
    dashboards = [os.path.join(dashboard_dir, f) for f in os.listdir(dashboard_dir) if f.endswith(".json")]
    check(dashboards, "a provisioned dashboard")
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        job = server.client.wait(server.client.submit(sample_model(work)).id)
        check(job.state == server.client.SUCCEEDED, job.error)
        wait_until(lambda: "kiln_phase_duration_seconds_bucket" in server.metrics(), 5, "histograms")
        exported = set(re.findall(r"^# TYPE (\w+) ", server.metrics(), re.M))
        exported |= {n + suffix for n in exported for suffix in ("_bucket", "_sum", "_count")}
        for path in dashboards:
            panels = json.load(open(path))["panels"]
            check(panels, f"{path} has panels")
            for panel in panels:
                exprs = [t["expr"] for t in panel.get("targets", [])]
                check(exprs, f"panel '{panel.get('title')}' queries something")
                for expr in exprs:
                    names = set(re.findall(r"\bkiln_\w+", expr))
                    check(names, f"panel '{panel['title']}' queries a kiln metric: {expr}")
                    for name in names:
                        check(name in exported, f"panel '{panel['title']}' queries {name}, which kilnd does not export")
        log(f"{sum(len(json.load(open(p))['panels']) for p in dashboards)} panels checked")


def scenario_prometheus(work):
    """Debian's real Prometheus scrapes kilnd; a job counter is read back through its HTTP API."""
    prometheus = shutil.which("prometheus")
    check(prometheus, "prometheus is installed (deploy/install-deps.sh)")
    server = Kilnd(os.path.join(work, "data"), workers=1)
    prom = None
    try:
        job = server.client.wait(server.client.submit(sample_model(work)).id)
        check(job.state == server.client.SUCCEEDED, job.error)
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            prom_port = s.getsockname()[1]
        config = os.path.join(work, "prometheus.yml")
        # The shipped config, pointed at this kilnd's metrics port.
        shipped = open(os.path.join(ARGS.root, "deploy", "prometheus.yml")).read()
        check("kilnd" in shipped, "deploy/prometheus.yml scrapes kilnd")
        with open(config, "w") as f:
            f.write(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: kilnd\n"
                    f"    static_configs:\n      - targets: ['{server.metrics_address}']\n")
        prom = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={work}/tsdb",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=open(os.path.join(work, "prometheus.log"), "wb"), stderr=subprocess.STDOUT)

        def finished_jobs():
            try:
                url = (f"http://127.0.0.1:{prom_port}/api/v1/query?query="
                       "sum(kiln_jobs_finished_total%7Bstate%3D%22SUCCEEDED%22%7D)")
                body = json.load(urllib.request.urlopen(url, timeout=5))
                result = body["data"]["result"]
                return float(result[0]["value"][1]) if result else None
            except Exception:  # noqa: BLE001 - not up yet
                return None

        value = wait_until(finished_jobs, 60, "Prometheus to scrape kilnd")
        check(value == 1.0, f"Prometheus reads one finished job: {value}")
        log(f"Prometheus query kiln_jobs_finished_total{{state=SUCCEEDED}} = {value}")
    finally:
        if prom:
            prom.terminate()
            prom.wait()
        server.stop()


def batched_mlp(work):
    """A random MLP classifier at batch 64 (for int8 and pruning verdicts): top-1 agreement
    is measured over 64 rows whose classes differ (a random CNN's global pooling gives every
    random image the same class, which no calibration could change)."""
    import onnx
    model = onnx.load(make_model(work, "classifier", "mlp.onnx", seed=1))
    for value in list(model.graph.input) + list(model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 64
    batched = os.path.join(work, "mlp64.onnx")
    onnx.save(model, batched)
    return batched


def write_input(path, array):
    """`array` as an f32 TensorProto named "input" at `path`."""
    from onnx import numpy_helper
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").write(numpy_helper.from_array(array.astype("float32"), "input").SerializeToString())


def scenario_int8(work):
    """An int8 job through kilnd: calibration samples uploaded as blobs, the report judged by
    top-1 agreement with the fp32 model against --max-top1-drop, a failing verdict for a
    calibration set that clips everything, and the cache keyed by the calibration."""
    import numpy as np
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        batched = batched_mlp(work)
        rng = np.random.default_rng(3)
        for k in range(4):
            x = rng.standard_normal((64, 32))
            write_input(os.path.join(work, "cal", f"s{k}", "input_0.pb"), x)
            write_input(os.path.join(work, "badcal", f"s{k}", "input_0.pb"), x * 1e-3)  # ranges 1000x too small
        write_input(os.path.join(work, "inputs", "input.pb"), rng.standard_normal((64, 32)))
        out = os.path.join(work, "out")
        result = kiln("submit", batched, "--server", server.address, "--inputs", os.path.join(work, "inputs"), "--precision", "int8",
                      "--calibration", os.path.join(work, "cal"), "--max-top1-drop", "20", "--wait", "--output", out,
                      "--fail-on-accuracy")
        check(result.stderr.count("uploading calibration sample") == 4, f"four calibration blobs uploaded: {result.stderr}")
        report = json.load(open(os.path.join(out, "report.json")))
        check(report["precision"] == "int8", "the report says int8")
        verdict = report["verdict"]
        check(verdict["passed"] and verdict["max_top1_drop"] == 20 and verdict["top1_drop_points"] <= 20, f"verdict: {verdict}")
        quantization = report["compile"]["quantization"]
        check(quantization["quantized_nodes"] == 3 and quantization["calibration_samples"] == 4, f"compile report: {quantization}")
        layers = quantization["layers_by_error"]
        check(len(layers) == 3 and layers[0]["snr_db"] <= layers[-1]["snr_db"], f"per-layer error breakdown: {layers}")
        check(report["outputs"][0]["top1_agreement"] >= 0.8, f"top-1 agreement: {report['outputs'][0]}")
        # The same request again: answered from the action cache.
        again = kiln("submit", batched, "--server", server.address, "--inputs", os.path.join(work, "inputs"), "--precision", "int8",
                     "--calibration", os.path.join(work, "cal"), "--max-top1-drop", "20", "--wait")
        check("cache hit" in again.stderr and "uploading" not in again.stderr, f"second submit is a cache hit: {again.stderr}")
        # Calibration that clips every activation: the verdict fails, and --fail-on-accuracy exits 3.
        bad = kiln("submit", batched, "--server", server.address, "--inputs", os.path.join(work, "inputs"), "--precision", "int8",
                   "--calibration", os.path.join(work, "badcal"), "--max-top1-drop", "20", "--wait", "--output",
                   os.path.join(work, "bad"), "--fail-on-accuracy", check_rc=False)
        check(bad.returncode == 3, f"a failed int8 verdict exits 3: {bad.returncode} {bad.stderr}")
        report = json.load(open(os.path.join(work, "bad", "report.json")))
        check(not report["verdict"]["passed"] and report["verdict"]["top1_drop_points"] > 20, f"bad verdict: {report['verdict']}")
        check("top-1 changed on" in report["verdict"]["reason"], report["verdict"]["reason"])
        # int8 options without int8, and int8 without calibration: usage errors naming the flag.
        wrong = kiln("submit", batched, "--server", server.address, "--calibration", os.path.join(work, "cal"), check_rc=False)
        check(wrong.returncode == 2 and "--calibration goes with --precision int8" in wrong.stderr, wrong.stderr)
        wrong = kiln("submit", batched, "--server", server.address, "--precision", "int8", check_rc=False)
        check(wrong.returncode == 2 and "--precision int8 needs --calibration" in wrong.stderr, wrong.stderr)
        # The API refuses int8 without calibration samples too.
        from kiln_client import KilnError, digest_of, kiln_pb2
        request = kiln_pb2.SubmitRequest()
        request.spec.model.CopyFrom(digest_of(open(batched, "rb").read()))
        request.spec.quantization.precision = "int8"
        try:
            server.client._call("Submit", request)
            check(False, "Submit accepted int8 without calibration")
        except KilnError as error:
            check(error.code.name == "INVALID_ARGUMENT" and "quantization.calibration" in str(error), str(error))


def scenario_prune(work):
    """Pruned jobs through kilnd: the ratios reach the compiler, the compile report inside the
    accuracy report gives parameters and FLOPs before and after, the verdict follows top-1
    agreement with the unpruned model against --max-top1-drop (pruning 90 % of the hidden
    units at a 0-point bar fails), int8 and pruning combine, and bad ratios are refused."""
    import numpy as np
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        batched = batched_mlp(work)
        rng = np.random.default_rng(4)
        for k in range(2):
            write_input(os.path.join(work, "cal", f"s{k}", "input_0.pb"), rng.standard_normal((64, 32)))
        write_input(os.path.join(work, "inputs", "input.pb"), rng.standard_normal((64, 32)))
        inputs = ["--server", server.address, "--inputs", os.path.join(work, "inputs")]
        out = os.path.join(work, "out")
        kiln("submit", batched, *inputs, "--prune-channels", "0.25", "--prune-weights", "0.5", "--max-top1-drop", "100", "--wait",
             "--output", out, "--fail-on-accuracy")
        report = json.load(open(os.path.join(out, "report.json")))
        check(report["pruning"] == {"channels": 0.25, "weights": 0.5}, f"the report names the ratios: {report.get('pruning')}")
        verdict = report["verdict"]
        check(verdict["passed"] and verdict["max_top1_drop"] == 100 and "top1_drop_points" in verdict, f"verdict: {verdict}")
        pruning = report["compile"]["pruning"]
        check(pruning["pruned_layers"] >= 1 and pruning["after"]["parameters"] < pruning["before"]["parameters"] and
              pruning["after"]["flops"] < pruning["before"]["flops"], f"compile report: {pruning}")
        check(0.45 <= pruning["after"]["weight_sparsity"] <= 0.55, f"half the remaining weights are 0: {pruning}")
        layers = pruning["layers_by_error"]  # on the uploaded validation input
        check(len(layers) >= 1 and all("snr_db" in l and l["max_abs_error"] > 0 for l in layers), f"per-layer breakdown: {layers}")
        # Most hidden units gone and no top-1 change allowed: the verdict fails, exit 3.
        bad = kiln("submit", batched, *inputs, "--prune-channels", "0.9", "--max-top1-drop", "0", "--wait", "--output",
                   os.path.join(work, "bad"), "--fail-on-accuracy", check_rc=False)
        check(bad.returncode == 3, f"a failed pruning verdict exits 3: {bad.returncode} {bad.stderr}")
        report = json.load(open(os.path.join(work, "bad", "report.json")))
        check(not report["verdict"]["passed"] and report["verdict"]["top1_drop_points"] > 0, f"bad verdict: {report['verdict']}")
        check(report["verdict"]["reason"].startswith("pruned: top-1 changed on"), report["verdict"]["reason"])
        # int8 after pruning.
        both = os.path.join(work, "both")
        kiln("submit", batched, *inputs, "--prune-channels", "0.25", "--precision", "int8", "--calibration", os.path.join(work, "cal"),
             "--max-top1-drop", "100", "--wait", "--output", both)
        report = json.load(open(os.path.join(both, "report.json")))
        check(report["precision"] == "int8" and report["pruning"]["channels"] == 0.25, f"int8 + pruning: {report['precision']}")
        check(report["compile"]["quantization"]["quantized_nodes"] >= 2, report["compile"]["quantization"])
        # Usage and API errors.
        wrong = kiln("submit", batched, "--server", server.address, "--prune-channels", "1", check_rc=False)
        check(wrong.returncode == 2 and "--prune-channels 1 is not a share in [0, 1)" in wrong.stderr, wrong.stderr)
        wrong = kiln("submit", batched, "--server", server.address, "--max-top1-drop", "5", check_rc=False)
        check(wrong.returncode == 2 and "--max-top1-drop goes with" in wrong.stderr, wrong.stderr)
        from kiln_client import KilnError, digest_of, kiln_pb2
        request = kiln_pb2.SubmitRequest()
        request.spec.model.CopyFrom(digest_of(open(batched, "rb").read()))
        request.spec.pruning.channels = 1.5
        try:
            server.client._call("Submit", request)
            check(False, "Submit accepted prune_channels 1.5")
        except KilnError as error:
            check(error.code.name == "INVALID_ARGUMENT" and "pruning.channels 1.5" in str(error), str(error))


def compile_locally_and_remotely(server, work, name, model, flags):
    """`kiln compile` and `kiln submit` of one model with the same flags: returns the local
    action key, artifact path and manifest, and the job with the downloaded outputs' dir."""
    local = os.path.join(work, f"{name}.so")
    compiled = kiln("compile", model, "-o", local, "--report", os.path.join(work, f"{name}.report.json"), *flags)
    key = re.search(r"^kiln: action key ([0-9a-f]{64})$", compiled.stderr, re.M)
    check(key, f"kiln compile prints the action key: {compiled.stderr}")
    manifest = json.loads(kiln("inspect", local).stdout)
    out = os.path.join(work, f"{name}.out")
    submitted = kiln("submit", model, "--server", server.address, "--wait", "--output", out, *flags)
    job_id = re.search(r"^kiln: job (job-[0-9a-f]{16}) ", submitted.stderr, re.M).group(1)
    job = server.client.get_job(job_id)
    check(job.state == server.client.SUCCEEDED, f"{name}: {job.error}")
    return key.group(1), local, manifest, job, out


def scenario_compile_identity(work):
    """The same model and options through `kiln compile` and through the service give the
    same action key and byte-identical artifacts and manifests: fp32 on the host, a preset
    (its name kept in the manifest and the job), and int8 with calibration samples and
    validation inputs (both packed into InputSet blobs the same way)."""
    import numpy as np
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        model = sample_model(work)
        rng = np.random.default_rng(5)
        for k in range(3):
            write_input(os.path.join(work, "cal", f"sample_{k}", "input_0.pb"), rng.standard_normal((1, 3, 32, 32)))
        write_input(os.path.join(work, "inputs", "input.pb"), rng.standard_normal((1, 3, 32, 32)))
        cases = {
            "fp32": [],
            "preset": ["--target", "x86-64-v3", "--seed", "3"],
            "int8": ["--precision", "int8", "--calibration", os.path.join(work, "cal"), "--calibration-method",
                     "entropy", "--keep-float", "conv2", "--inputs", os.path.join(work, "inputs"),
                     "--atol", "1e-2", "--rtol", "1e-2", "--max-top1-drop", "100"],
        }
        keys = set()
        for name, flags in cases.items():
            key, local, manifest, job, out = compile_locally_and_remotely(server, work, name, model, flags)
            log(f"{name}: action key {key[:16]}..., artifact {os.path.getsize(local)} bytes")
            check(job.action_key == key, f"{name}: kiln compile's action key {key} is the service's {job.action_key}")
            check(sha256_file(local) == sha256_file(os.path.join(out, "artifact.so")),
                  f"{name}: the local artifact and the service's are byte-identical")
            check(json.load(open(os.path.join(out, "manifest.json"))) == manifest, f"{name}: the same manifest")
            check(manifest["action_key"] == key, f"{name}: the manifest names the action")
            report = json.load(open(os.path.join(work, f"{name}.report.json")))
            check(report["action_key"] == key, f"{name}: the compile report names the action")
            preset = "x86-64-v3" if name == "preset" else "host"
            check(manifest["spec"]["target"]["preset"] == preset and job.target_name == preset,
                  f"{name}: the preset name survives: {manifest['spec']['target']['preset']}, job {job.target_name}")
            keys.add(key)
        check(len(keys) == len(cases), "different options, different actions")
        int8 = json.load(open(os.path.join(work, "int8.out", "report.json")))
        check(int8["compile"]["quantization"]["calibration_samples"] == 3 and int8["inputs"]["source"] == "uploaded",
              f"int8 used the uploaded calibration and inputs: {int8['compile']['quantization']}")
        # The same submit again is a cache hit on the same key.
        again = kiln("submit", model, "--server", server.address, *cases["int8"], "--wait")
        check("cache hit" in again.stderr, f"resubmit hits the cache: {again.stderr}")


def conv_model(work, batch=1):
    """One 3x3 Conv (8 -> 16 channels, 12x12) whose output is the graph output; batch "N"
    makes its batch known only at run time (the dynamic glue runs it)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    weights = np.random.default_rng(5).standard_normal((16, 8, 3, 3)).astype("float32") * 0.2
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["output"], name="conv", pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 8, 12, 12])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 16, 12, 12])],
        [numpy_helper.from_array(weights, "w")])
    path = os.path.join(work, f"conv-{batch}.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def scenario_injected_kernel_bug(work):
    """Validation compares the artifact with the independent reference (compiler/reference),
    so a wrong kernel fails the accuracy report: each model passes, then fails once the
    test-only switch KILN_TEST_INJECT_KERNEL_BUG makes one kernel add 0.01 to its first
    output element (softmax in the sample CNN, conv in a one-Conv model, and conv in that
    model with a batch known only at run time, whose kernels the dynamic glue calls)."""
    models = {"softmax": ("softmax", sample_model(work)), "conv": ("conv", conv_model(work)),
              "conv-dynamic": ("conv", conv_model(work, "N"))}
    flags = ["--atol", "1e-4", "--rtol", "1e-3", "--wait", "--skip-latency"]

    def submit(server, kernel, model, name):
        out = os.path.join(work, name)
        result = kiln("submit", model, "--server", server.address, *flags, "--output", out, "--fail-on-accuracy",
                      check_rc=False)
        log(f"{name}: exit {result.returncode}: {result.stdout.strip()}")
        return result, json.load(open(os.path.join(out, "report.json")))

    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        for kernel, (_, model) in models.items():
            result, report = submit(server, kernel, model, f"{kernel}-ok")
            check(result.returncode == 0 and report["verdict"]["passed"], f"{kernel}: clean verdict {report['verdict']}")
            check(report["outputs"][0]["max_abs_error"] < 1e-4, f"{kernel}: clean error {report['outputs'][0]}")
    for kernel, (injected, model) in models.items():
        env = dict(os.environ, KILN_TEST_INJECT_KERNEL_BUG=injected)
        with Kilnd(os.path.join(work, f"data-{kernel}"), workers=1, env=env) as server:
            result, report = submit(server, kernel, model, f"{kernel}-bug")
            check(result.returncode == 3, f"{kernel}: a kernel bug fails --fail-on-accuracy (exit 3): {result.stderr}")
            check("accuracy report: FAIL" in result.stdout, f"{kernel}: the CLI says FAIL: {result.stdout}")
            output = report["outputs"][0]
            check(not report["verdict"]["passed"], f"{kernel}: verdict {report['verdict']}")
            check(output["max_abs_error"] > 0.005 and output["count_outside_tolerance"] >= 1,
                  f"{kernel}: the injected error is measured: {output}")


def scenario_random_outputs(work):
    """An output drawn by an unseeded random op (RandomNormalLike) differs between the artifact
    and the reference by design: validation compares its shape and dtype only and says so,
    while the model's other output is compared as usual."""
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("RandomNormalLike", ["x"], ["r"], name="draw", scale=0.5),
         helper.make_node("Add", ["x", "r"], ["noisy"], name="add_noise"),
         helper.make_node("Relu", ["x"], ["clean"], name="relu")], "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("noisy", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("clean", TensorProto.FLOAT, [4, 8])])
    model = os.path.join(work, "random.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = os.path.join(work, "out")
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        result = kiln("submit", model, "--server", server.address, "--atol", "1e-4", "--rtol", "1e-3", "--wait",
                      "--skip-latency", "--output", out, "--fail-on-accuracy", check_rc=False)
    log(f"random outputs: exit {result.returncode}: {result.stdout.strip()}")
    report = json.load(open(os.path.join(out, "report.json")))
    outputs = {o["name"]: o for o in report["outputs"]}
    check(result.returncode == 0 and report["verdict"]["passed"], f"verdict {report['verdict']}: {result.stderr}")
    check(outputs["noisy"].get("drawn_at_random") is True, f"noisy is marked drawn at random: {outputs['noisy']}")
    check(not outputs["clean"].get("drawn_at_random", False) and outputs["clean"]["max_abs_error"] < 1e-6,
          f"clean is compared: {outputs['clean']}")


def scenario_dynamic_shapes(work):
    """A model whose batch is known only at run time compiles once through the service, is
    validated against the reference at batch 2, and the fetched artifact runs at batch 1
    and 5 with the same outputs as the reference would give (checked by `kiln run`)."""
    import numpy as np
    import onnx
    import onnx.numpy_helper as nh
    model = make_model(work, "dynamic", "dynamic.onnx")
    with Kilnd(os.path.join(work, "data"), workers=1) as server:
        out = os.path.join(work, "result")
        result = kiln("submit", model, "--server", server.address, "--wait", "--output", out, "--fail-on-accuracy")
        log(result.stdout)
        report = json.load(open(os.path.join(out, "report.json")))
        check(report["verdict"]["passed"], f"the verdict passes: {report['verdict']}")
        check(report["inputs"]["tensors"] == ["input: f32[2,32]"], f"validated at batch 2: {report['inputs']}")
        artifact = next(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".so"))
        for batch in (1, 5):
            x = os.path.join(work, f"x{batch}.pb")
            subprocess.run([sys.executable, "-c", f"""
import numpy as np, onnx.numpy_helper as nh
open({x!r}, 'wb').write(nh.from_array(np.random.default_rng({batch}).standard_normal(({batch}, 32)).astype(np.float32), 'input').SerializeToString())
"""], check=True)
            run_dir = os.path.join(work, f"run{batch}")
            kiln("run", artifact, "--input", f"input={x}", "--output-dir", run_dir)
            t = onnx.TensorProto()
            t.ParseFromString(open(os.path.join(run_dir, "output_0.pb"), "rb").read())
            probabilities = nh.to_array(t)
            check(probabilities.shape == (batch, 10), f"batch {batch}: output shape {probabilities.shape}")
            check(np.allclose(probabilities.sum(axis=1), 1, atol=1e-5), f"batch {batch}: rows are distributions")


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    ARGS = parser.parse_args()
    ARGS.build = os.path.abspath(ARGS.build)
    sys.path.insert(0, os.path.join(ARGS.build, "python"))
    sys.path.insert(0, os.path.join(ARGS.root, "clients", "python"))
    work = tempfile.mkdtemp(prefix=f"kiln-e2e-{ARGS.scenario}-")
    log(f"{ARGS.scenario}: {SCENARIOS[ARGS.scenario].__doc__.strip()}")
    try:
        SCENARIOS[ARGS.scenario](work)
    except BaseException:
        for root, _, files in os.walk(work):
            for f in files:
                if f in ("kilnd.log", "prometheus.log"):
                    print(f"----- {os.path.join(root, f)} (tail)\n" + open(os.path.join(root, f), errors="replace").read()[-4000:])
        raise
    shutil.rmtree(work, ignore_errors=True)
    log(f"{ARGS.scenario}: passed")


if __name__ == "__main__":
    main()
