#include "common/internal_credential.h"

#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_interceptor.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/crypto.h"
#include "common/grpc_log.h"
#include "common/errors.h"

namespace calleval {
namespace {

constexpr size_t kMinCredentialChars = 16;
// The one sent and the ones still accepted while a rotation is under way: two is what a rotation
// needs; a few more leave room for one that was interrupted.
constexpr size_t kMaxSecrets = 4;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The secrets of a credential, one per line (rotation: internal_credential.h).
std::vector<absl::string_view> Secrets(absl::string_view credential) {
  return absl::StrSplit(credential, '\n', absl::SkipEmpty());
}

absl::StatusOr<std::string> Validate(const std::string& path, absl::string_view content) {
  std::vector<std::string> secrets;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    absl::string_view secret = absl::StripAsciiWhitespace(line);
    if (secret.empty()) continue;
    if (secret.size() < kMinCredentialChars) {
      return absl::InvalidArgumentError(absl::StrCat("the internal credential in ", path,
                                                     " must hold at least ", kMinCredentialChars,
                                                     " characters"));
    }
    for (char c : secret) {
      if (c < 0x20 || c > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the internal credential in ", path, " must be printable ASCII (e.g. hex)"));
      }
    }
    secrets.emplace_back(secret);
  }
  if (secrets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the internal credential in ", path,
                                                   " must hold at least ", kMinCredentialChars,
                                                   " characters"));
  }
  if (secrets.size() > kMaxSecrets) {
    return absl::InvalidArgumentError(
        absl::StrCat("the internal credential in ", path, " holds ", secrets.size(),
                     " lines; at most ", kMaxSecrets, " (the one sent, then the others accepted)"));
  }
  return absl::StrJoin(secrets, "\n");
}

// Adds the credential to the initial metadata of every call on a channel.
class CredentialInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit CredentialInterceptor(const std::string* credential) : credential_(credential) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kInternalCredentialMetadata, *credential_);
    }
    methods->Proceed();
  }

 private:
  const std::string* credential_;
};

class CredentialInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit CredentialInterceptorFactory(std::string credential)
      : credential_(std::move(credential)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new CredentialInterceptor(&credential_);
  }

 private:
  // The channel owns its factories, so the string outlives every call.
  const std::string credential_;
};

}  // namespace

absl::StatusOr<std::string> ReadInternalCredential(const std::string& path) {
  absl::StatusOr<std::string> content = ReadFile(path);
  if (!content.ok()) return content.status();
  return Validate(path, *content);
}

absl::StatusOr<std::string> LoadOrCreateInternalCredential(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) {
    // Written whole under a temporary name, then linked into place: link() fails when another
    // process got there first, and nobody ever reads a half-written file.
    const std::string tmp = absl::StrCat(path, ".", ::getpid(), ".tmp");
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
    }
    const std::string secret = HexEncode(RandomBytes(32)) + "\n";
    const bool written =
        ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
    ::close(fd);
    if (!written || (::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST)) {
      const std::string reason = strerror(errno);
      ::unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("cannot create ", path, ": ", reason));
    }
    ::unlink(tmp.c_str());
  }
  return ReadInternalCredential(path);
}

absl::Status CheckInternalCredential(const std::optional<std::string>& presented,
                                     absl::string_view credential) {
  if (!presented.has_value()) {
    return UnauthenticatedError(
        absl::StrCat("internal method: the ", kInternalCredentialMetadata, " metadata is missing"));
  }
  // Digests have one length, so neither the length of the secret nor where a guess goes wrong
  // shows in the time taken; every secret is compared, so neither does which one matched.
  const std::string presented_digest = Sha256(*presented);
  bool accepted = false;
  for (absl::string_view secret : Secrets(credential)) {
    accepted |= ConstantTimeEquals(presented_digest, Sha256(secret));
  }
  if (!accepted) {
    return UnauthenticatedError(absl::StrCat("internal method: the ", kInternalCredentialMetadata,
                                             " metadata is not this installation's credential"));
  }
  return absl::OkStatus();
}

absl::Status CheckInternalCredential(const grpc::ServerContextBase& context,
                                     absl::string_view credential) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kInternalCredentialMetadata);
  if (it == metadata.end()) return CheckInternalCredential(std::nullopt, credential);
  return CheckInternalCredential(std::string(it->second.data(), it->second.size()), credential);
}

std::shared_ptr<grpc::Channel> CreateInternalChannel(const std::string& target,
                                                     const std::string& credential) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  // The first secret is the one this process sends (rotation: internal_credential.h).
  const std::vector<absl::string_view> secrets = Secrets(credential);
  factories.push_back(std::make_unique<CredentialInterceptorFactory>(
      secrets.empty() ? std::string() : std::string(secrets.front())));
  // The request id of the work that makes a call goes with it (common/grpc_log.h).
  factories.push_back(NewRequestIdClientInterceptorFactory());
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(), std::move(factories));
}

}  // namespace calleval
