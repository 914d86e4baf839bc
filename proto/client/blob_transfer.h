// Client side of the blob calls, shared by the kiln CLI and kiln-worker: upload bytes
// under their digest (1 MiB chunks), download and verify a blob, resuming from the last
// byte received when the stream breaks.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "kiln/v1/kiln.grpc.pb.h"

namespace kiln::client {

v1::Digest DigestOfBytes(std::string_view bytes);
absl::Status FromGrpc(const grpc::Status& status);

// Uploads unless the server already has it (FindMissing); returns the digest.
absl::StatusOr<v1::Digest> UploadBlob(v1::Kiln::StubInterface& stub, std::string_view bytes, bool check_missing = true);
// Downloads, resuming up to `max_resumes` times, and checks the bytes against the digest.
absl::StatusOr<std::string> DownloadBlob(v1::Kiln::StubInterface& stub, const v1::Digest& digest, int max_resumes = 3);

std::shared_ptr<grpc::Channel> Connect(const std::string& address);

}  // namespace kiln::client
