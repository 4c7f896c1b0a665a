#pragma once

// The installation's internal credential: a shared secret the processes of one installation
// send each other in call metadata, so that methods meant only for them (the analysis and
// transcription queues, Accounts/Authenticate) do not answer whoever reaches the gRPC port.
// Public methods keep the API-key rule; the secret is never an API key.

#include <grpcpp/channel.h>
#include <grpcpp/server_context.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace calleval {

// The metadata key that carries the credential (gRPC metadata keys are lower case).
inline constexpr char kInternalCredentialMetadata[] = "x-calleval-internal";

// A credential is one secret or a few, one per line: a process sends the first and accepts every
// one, so the secret can change without a moment when processes refuse each other (rotation,
// docs/operations.md: add the new secret second everywhere, then first, then drop the old one,
// restarting the processes after each step). The functions below take and give that text.
//
// The credential in `path`, as given by --internal-credential-file (a shared file or a mounted
// Kubernetes Secret). Surrounding whitespace (a trailing newline) and blank lines are dropped;
// each secret must be at least 16 printable ASCII characters, since it travels as a metadata
// value, and a file holds at most 4.
absl::StatusOr<std::string> ReadInternalCredential(const std::string& path);

// The credential in `path`, created first when missing: 32 random bytes in hex, mode 0600.
// Processes sharing a data dir race safely: the first to create the file wins, all read it.
absl::StatusOr<std::string> LoadOrCreateInternalCredential(const std::string& path);

// OK when the call carries one of the credential's secrets, else UNAUTHENTICATED. The comparison
// takes the same time wherever the values differ, whatever their lengths, and whichever matched.
absl::Status CheckInternalCredential(const grpc::ServerContextBase& context,
                                     absl::string_view credential);
// The same check of a credential already read from the call (nullopt: none was sent).
absl::Status CheckInternalCredential(const std::optional<std::string>& presented,
                                     absl::string_view credential);

// A channel to `target` whose every call carries the credential's first secret, for the clients
// one role has of another (scoring workers' queues, the remote authenticator).
std::shared_ptr<grpc::Channel> CreateInternalChannel(const std::string& target,
                                                     const std::string& credential);

}  // namespace calleval
