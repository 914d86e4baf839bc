"""Python client for the Kiln compile service (kiln.v1 over gRPC).

    from kiln_client import KilnClient
    client = KilnClient("127.0.0.1:50051")
    job = client.submit("model.onnx", target="host", atol=1e-3, rtol=1e-3, labels={"ci": "1"})
    job = client.wait(job.id, on_event=lambda e: print(e.phase, e.progress))
    if job.state == client.SUCCEEDED:
        report = client.report(job)          # the accuracy report, parsed JSON
        client.download_to(job.result.artifact, "model.so")

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
    from kiln.v1 import kiln_pb2, kiln_pb2_grpc  # noqa: E402
except ImportError as error:  # pragma: no cover - a setup problem, said plainly
    raise ImportError("kiln_client needs the generated kiln.v1 stubs: run clients/python/generate.sh "
                      "or put the build's python/ directory on PYTHONPATH") from error

CHUNK_BYTES = 1 << 20

__all__ = ["KilnClient", "KilnError", "kiln_pb2", "digest_of"]


class KilnError(Exception):
    """A failed RPC: `code` is the grpc.StatusCode, the message says what to fix."""

    def __init__(self, method, rpc_error):
        self.code = rpc_error.code()
        self.details = rpc_error.details()
        super().__init__(f"{method}: {self.code.name}: {self.details}")


def digest_of(data):
    return kiln_pb2.Digest(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


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
        entries = [kiln_pb2.InputSet.Entry(tensor_proto=open(p, "rb").read()) for p in paths]
        return kiln_pb2.InputSet(inputs=entries).SerializeToString()

    def submit(self, model, target="host", atol=None, rtol=None, inputs=None, labels=None, pipeline="",
               input_shapes=None, seed=0):
        """Uploads what is missing and submits. `model` is a path or bytes; `inputs` a list
        of TensorProto file paths or InputSet bytes. Returns the Job."""
        data = open(model, "rb").read() if isinstance(model, str) else model
        request = kiln_pb2.SubmitRequest(model=self.upload(data), target=target, labels=labels or {})
        request.options.pipeline = pipeline
        for name, dims in (input_shapes or {}).items():
            request.options.input_shapes.add(name=name, dims=list(dims))
        if atol is not None:
            request.validation.atol = atol
        if rtol is not None:
            request.validation.rtol = rtol
        request.validation.seed = seed
        if inputs is not None:
            blob = inputs if isinstance(inputs, bytes) else self.input_set_from_files(inputs)
            request.validation.input_set.CopyFrom(self.upload(blob))
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

    def lookup(self, model_digest, target="host", atol=None, rtol=None):
        request = kiln_pb2.LookupRequest(model=model_digest, target=target)
        if atol is not None:
            request.validation.atol = atol
        if rtol is not None:
            request.validation.rtol = rtol
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
        """The job's accuracy report (JSON, schema kiln.accuracy-report v1) as a dict."""
        return json.loads(self.download(job.result.report))
