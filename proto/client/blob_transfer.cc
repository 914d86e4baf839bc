// Blob transfer helpers: see blob_transfer.h.
#include "proto/client/blob_transfer.h"

#include "absl/strings/str_cat.h"
#include "kiln/cache/blob_store.h"

namespace kiln::client {

v1::Digest DigestOfBytes(std::string_view bytes) {
  cache::Digest d = cache::DigestOf(bytes);
  v1::Digest out;
  out.set_sha256(d.sha256_hex);
  out.set_size_bytes(d.size_bytes);
  return out;
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::shared_ptr<grpc::Channel> Connect(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

absl::StatusOr<v1::Digest> UploadBlob(v1::Kiln::StubInterface& stub, std::string_view bytes, bool check_missing) {
  const v1::Digest digest = DigestOfBytes(bytes);
  if (check_missing) {
    grpc::ClientContext context;
    v1::FindMissingRequest request;
    *request.add_digests() = digest;
    v1::FindMissingResponse response;
    if (auto s = stub.FindMissing(&context, request, &response); !s.ok()) return FromGrpc(s);
    if (response.missing_size() == 0) return digest;
  }
  grpc::ClientContext context;
  v1::UploadResponse response;
  auto writer = stub.Upload(&context, &response);
  constexpr size_t kChunk = 1 << 20;
  size_t offset = 0;
  bool first = true;
  do {
    v1::UploadRequest chunk;
    if (first) *chunk.mutable_digest() = digest;
    first = false;
    const size_t n = std::min(kChunk, bytes.size() - offset);
    chunk.set_data(bytes.data() + offset, n);
    offset += n;
    if (!writer->Write(chunk)) break;  // the server ended the call early; Finish says why
  } while (offset < bytes.size());
  writer->WritesDone();
  if (auto s = writer->Finish(); !s.ok()) return FromGrpc(s);
  return digest;
}

absl::StatusOr<std::string> DownloadBlob(v1::Kiln::StubInterface& stub, const v1::Digest& digest, int max_resumes) {
  std::string bytes;
  grpc::Status last;
  for (int attempt = 0; attempt <= max_resumes; ++attempt) {
    grpc::ClientContext context;
    v1::DownloadRequest request;
    *request.mutable_digest() = digest;
    request.set_offset(static_cast<int64_t>(bytes.size()));
    auto reader = stub.Download(&context, request);
    v1::DownloadResponse chunk;
    while (reader->Read(&chunk)) {
      if (chunk.offset() != static_cast<int64_t>(bytes.size())) {
        return absl::DataLossError(absl::StrCat("download of ", digest.sha256(), ": chunk at offset ", chunk.offset(),
                                                " but ", bytes.size(), " bytes received"));
      }
      bytes += chunk.data();
    }
    last = reader->Finish();
    if (last.ok()) break;
    // Only a broken transport is worth resuming; the server's own answers are final.
    if (last.error_code() != grpc::StatusCode::UNAVAILABLE &&
        last.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return FromGrpc(last);
    }
  }
  if (!last.ok()) return FromGrpc(last);
  const v1::Digest got = DigestOfBytes(bytes);
  if (got.sha256() != digest.sha256() || got.size_bytes() != digest.size_bytes()) {
    return absl::DataLossError(absl::StrCat("downloaded bytes hash to ", got.sha256(), "/", got.size_bytes(), ", not ",
                                            digest.sha256(), "/", digest.size_bytes()));
  }
  return bytes;
}

}  // namespace kiln::client
