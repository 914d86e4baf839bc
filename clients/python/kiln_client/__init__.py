"""Python client for the Kiln compile service (kiln.v1 over gRPC).

    from kiln_client import KilnClient
    client = KilnClient("127.0.0.1:50051")
    job = client.submit("model.onnx", target="host", atol=1e-3, rtol=1e-3, labels={"ci": "1"})
    job = client.wait(job.id, on_event=lambda e: print(e.phase, e.progress))
    if job.state == client.SUCCEEDED:
        report = client.report(job)          # the accuracy report (schema v2), parsed JSON
        client.download_to(job.result.artifact, "model.so")

A job is described by one kiln.v1.CompileSpec (proto/kiln/v1/spec.proto); `submit` fills
one from its arguments, or takes a `spec` to start from (int8, pruning, ...):

    spec = spec_pb2.CompileSpec()
    spec.quantization.precision = "int8"
    spec.quantization.calibration.append(client.upload(input_set_bytes))
    job = client.submit("model.onnx", spec=spec)

The generated stubs (kiln/v1/*_pb2.py) come from the build (build/python, on
PYTHONPATH) or from `clients/python/generate.sh`, which writes them beside this package.
Needs Debian's python3-grpcio and python3-protobuf.
"""
import hashlib
import json
import os
import sys

import grpc

_here = os.path.dirname(os.path.abspath(__file__))
for _candidate in (os.path.join(_here, "_generated"),):
    if os.path.isdir(_candidate) and _candidate not in sys.path:
        sys.path.insert(0, _candidate)
try:
    from kiln.v1 import kiln_pb2, kiln_pb2_grpc, spec_pb2  # noqa: E402
except ImportError as error:  # pragma: no cover - a setup problem, said plainly
    raise ImportError("kiln_client needs the generated kiln.v1 stubs: run clients/python/generate.sh "
                      "or put the build's python/ directory on PYTHONPATH") from error

CHUNK_BYTES = 1 << 20

__all__ = ["KilnClient", "KilnError", "kiln_pb2", "spec_pb2", "digest_of", "target_message"]


class KilnError(Exception):
    """A failed RPC: `code` is the grpc.StatusCode, the message says what to fix."""

    def __init__(self, method, rpc_error):
        self.code = rpc_error.code()
        self.details = rpc_error.details()
        super().__init__(f"{method}: {self.code.name}: {self.details}")


def digest_of(data):
    return spec_pb2.Digest(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def target_message(text):
    """A Target from the text form of `--target`: "host", a preset name, or
    "triple=T[,cpu=C][,features=+a,-b]" (features last: they hold commas). kilnd resolves
    and checks it."""
    if "=" not in text:
        return spec_pb2.Target(preset=text or "host")
    target = spec_pb2.Target(preset="custom")
    head, _, features = text.partition("features=")
    target.features.extend(f for f in features.split(",") if f)
    for part in filter(None, head.split(",")):
        key, _, value = part.partition("=")
        if key not in ("triple", "cpu"):
            raise ValueError(f"target spec '{text}': unknown key '{key}' (use triple, cpu, features)")
        setattr(target, key, value)
    return target


def _fill_spec(spec, target, atol, rtol, pipeline, input_shapes, seed):
    """Puts the common arguments into a CompileSpec (left as they are when not given)."""
    if target is not None:
        spec.target.CopyFrom(target_message(target))
    if pipeline:
        spec.pipeline = pipeline
    for name, dims in (input_shapes or {}).items():
        spec.input_shapes.add(name=name, dims=list(dims))
    if atol is not None:
        spec.accuracy.atol = atol
    if rtol is not None:
        spec.accuracy.rtol = rtol
    if seed:
        spec.accuracy.seed = seed
    return spec


class KilnClient:
    QUEUED = kiln_pb2.QUEUED
    RUNNING = kiln_pb2.RUNNING
    SUCCEEDED = kiln_pb2.SUCCEEDED
    FAILED = kiln_pb2.FAILED
    CANCELLED = kiln_pb2.CANCELLED
    TERMINAL = (kiln_pb2.SUCCEEDED, kiln_pb2.FAILED, kiln_pb2.CANCELLED)

    def __init__(self, address, timeout_s=60.0):
        self.address = address
        self.timeout_s = timeout_s
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)])
        self.stub = kiln_pb2_grpc.KilnStub(self.channel)

    def close(self):
        self.channel.close()

    def _call(self, method, *args, **kwargs):
        try:
            return getattr(self.stub, method)(*args, timeout=kwargs.pop("timeout", self.timeout_s), **kwargs)
        except grpc.RpcError as error:
            raise KilnError(method, error) from None

    @staticmethod
    def state_name(state):
        return kiln_pb2.JobState.Name(state)

    # Blobs.
    def find_missing(self, digests):
        return list(self._call("FindMissing", kiln_pb2.FindMissingRequest(digests=digests)).missing)

    def upload(self, data, digest=None, check_missing=True):
        """Uploads `data` unless the server has it; returns its digest."""
        digest = digest or digest_of(data)
        if check_missing and not self.find_missing([digest]):
            return digest

        def chunks():
            first = True
            for offset in range(0, max(len(data), 1), CHUNK_BYTES):
                yield kiln_pb2.UploadRequest(digest=digest if first else None, data=data[offset:offset + CHUNK_BYTES])
                first = False

        self._call("Upload", chunks())
        return digest

    def download(self, digest, offset=0):
        """The blob's bytes, resumed from where a broken stream stopped, digest-checked."""
        data = bytearray()
        for attempt in range(4):
            try:
                for chunk in self.stub.Download(kiln_pb2.DownloadRequest(digest=digest, offset=offset + len(data)),
                                                timeout=self.timeout_s):
                    data += chunk.data
                break
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE or attempt == 3:
                    raise KilnError("Download", error) from None
        if offset == 0 and hashlib.sha256(data).hexdigest() != digest.sha256:
            raise ValueError(f"downloaded bytes do not hash to {digest.sha256}")
        return bytes(data)

    def download_to(self, digest, path):
        with open(path, "wb") as out:
            out.write(self.download(digest))
        return path

    # Jobs.
    @staticmethod
    def input_set_from_files(paths):
        """An InputSet blob from ONNX TensorProto files, one per model input, in order."""
        entries = [spec_pb2.InputSet.Entry(tensor_proto=open(p, "rb").read()) for p in paths]
        return spec_pb2.InputSet(inputs=entries).SerializeToString()

    def submit(self, model, target=None, atol=None, rtol=None, inputs=None, labels=None, pipeline="",
               input_shapes=None, seed=0, spec=None):
        """Uploads what is missing and submits. `model` is a path or bytes; `inputs` a list
        of TensorProto file paths or InputSet bytes; `target` the --target text (default: the
        spec's, else "host", kilnd's machine); `spec` a CompileSpec to start from (the other
        arguments are put into it; its blobs must be uploaded). Returns the Job."""
        data = open(model, "rb").read() if isinstance(model, str) else model
        request = kiln_pb2.SubmitRequest(labels=labels or {})
        if spec is not None:
            request.spec.CopyFrom(spec)
        request.spec.model.CopyFrom(self.upload(data))
        _fill_spec(request.spec, target, atol, rtol, pipeline, input_shapes, seed)
        if inputs is not None:
            blob = inputs if isinstance(inputs, bytes) else self.input_set_from_files(inputs)
            request.spec.accuracy.input_set.CopyFrom(self.upload(blob))
        return self._call("Submit", request)

    def get_job(self, job_id):
        return self._call("GetJob", kiln_pb2.GetJobRequest(id=job_id))

    def cancel(self, job_id):
        return self._call("CancelJob", kiln_pb2.CancelJobRequest(id=job_id))

    def list_jobs(self, state=None, labels=None, page_size=50):
        """Every job matching the filter, following pages."""
        jobs, token = [], ""
        while True:
            page = self._call("ListJobs", kiln_pb2.ListJobsRequest(state=state or 0, labels=labels or {},
                                                                   page_size=page_size, page_token=token))
            jobs.extend(page.jobs)
            token = page.next_page_token
            if not token:
                return jobs

    def lookup(self, model_digest, target=None, atol=None, rtol=None, spec=None):
        """The cached result for this model and spec (NOT_FOUND when never compiled)."""
        request = kiln_pb2.LookupRequest()
        if spec is not None:
            request.spec.CopyFrom(spec)
        request.spec.model.CopyFrom(model_digest)
        _fill_spec(request.spec, target, atol, rtol, "", None, 0)
        return self._call("Lookup", request)

    def wait(self, job_id, on_event=None, timeout_s=3600.0):
        """Follows WatchJob to the job's end (reconnecting if the server restarts)."""
        job = None
        for _ in range(60):
            try:
                for event in self.stub.WatchJob(kiln_pb2.WatchJobRequest(id=job_id), timeout=timeout_s):
                    job = event.job
                    if on_event:
                        on_event(event)
                if job is not None and job.state in self.TERMINAL:
                    return job
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE:
                    raise KilnError("WatchJob", error) from None
            import time
            time.sleep(1)
        raise TimeoutError(f"lost track of job {job_id}")

    def report(self, job):
        """The job's accuracy report (JSON, schema kiln.accuracy-report, schema_version 2) as a dict."""
        return json.loads(self.download(job.result.report))
