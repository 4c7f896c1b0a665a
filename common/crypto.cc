#include "common/crypto.h"
#include "common/log.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdlib>

namespace calleval {

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    LogError("fatal: OpenSSL RAND_bytes failed");
    std::abort();
  }
  return out;
}

std::string Base64Url(absl::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  size_t i = 0;
  auto byte = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t v = byte(i) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
  } else if (rest == 2) {
    uint32_t v = (byte(i) << 16) | (byte(i + 1) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
  }
  return out;
}

std::string HexEncode(absl::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string Sha256(absl::string_view data) {
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

std::string HmacSha256(absl::string_view key, absl::string_view data) {
  std::string out(EVP_MAX_MD_SIZE, '\0');
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(),
       reinterpret_cast<unsigned char*>(out.data()), &len);
  out.resize(len);
  return out;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string Base64Encode(absl::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> Base64Decode(absl::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes.
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') ++padding;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++padding;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

namespace {

constexpr size_t kNonceBytes = 12;
constexpr size_t kTagBytes = 16;

struct CipherContext {
  CipherContext() : ctx(EVP_CIPHER_CTX_new()) {}
  ~CipherContext() { EVP_CIPHER_CTX_free(ctx); }
  EVP_CIPHER_CTX* ctx;
};

const unsigned char* Bytes(absl::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

std::string Seal(absl::string_view key, absl::string_view plaintext,
                 absl::string_view associated) {
  if (key.size() != 32) {
    LogError("fatal: Seal needs a 32-byte key");
    std::abort();
  }
  const std::string nonce = RandomBytes(kNonceBytes);
  std::string out = nonce;
  out.resize(kNonceBytes + plaintext.size() + kTagBytes);
  unsigned char* cipher = reinterpret_cast<unsigned char*>(out.data()) + kNonceBytes;
  CipherContext c;
  int len = 0, total = 0;
  bool ok = c.ctx != nullptr &&
            EVP_EncryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, Bytes(key), Bytes(nonce)) == 1 &&
            (associated.empty() ||
             EVP_EncryptUpdate(c.ctx, nullptr, &len, Bytes(associated),
                               static_cast<int>(associated.size())) == 1) &&
            EVP_EncryptUpdate(c.ctx, cipher, &len, Bytes(plaintext),
                              static_cast<int>(plaintext.size())) == 1;
  total = len;
  ok = ok && EVP_EncryptFinal_ex(c.ctx, cipher + total, &len) == 1;
  total += len;
  ok = ok && EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, cipher + total) == 1;
  if (!ok) {
    LogError("fatal: OpenSSL AES-256-GCM encryption failed");
    std::abort();
  }
  return out;
}

absl::StatusOr<std::string> Unseal(absl::string_view key, absl::string_view sealed,
                                   absl::string_view associated) {
  if (key.size() != 32 || sealed.size() < kNonceBytes + kTagBytes) {
    return absl::DataLossError("sealed value is malformed");
  }
  const absl::string_view nonce = sealed.substr(0, kNonceBytes);
  const absl::string_view cipher =
      sealed.substr(kNonceBytes, sealed.size() - kNonceBytes - kTagBytes);
  std::string tag(sealed.substr(sealed.size() - kTagBytes));
  std::string out(cipher.size(), '\0');
  CipherContext c;
  int len = 0;
  bool ok = c.ctx != nullptr &&
            EVP_DecryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, Bytes(key), Bytes(nonce)) == 1 &&
            (associated.empty() ||
             EVP_DecryptUpdate(c.ctx, nullptr, &len, Bytes(associated),
                               static_cast<int>(associated.size())) == 1) &&
            EVP_DecryptUpdate(c.ctx, reinterpret_cast<unsigned char*>(out.data()), &len,
                              Bytes(cipher), static_cast<int>(cipher.size())) == 1 &&
            EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) == 1;
  int final_len = 0;
  ok = ok && EVP_DecryptFinal_ex(c.ctx, reinterpret_cast<unsigned char*>(out.data()) + len,
                                 &final_len) == 1;
  if (!ok) {
    return absl::DataLossError(
        "sealed value does not open: altered, or sealed under another key");
  }
  return out;
}

}  // namespace calleval
