#pragma once

// Where a phone line is held, carried in its token (docs/channels.md, "When the runs and edge
// roles run apart"). A runs process without an edge of its own serves its lines on a small
// listener (--media-addr); the carrier still reaches the public edge, which must find that
// listener from the URL alone, with nothing shared but the installation's internal credential.
// So such a process mints tokens of the form
//   <random>.<address>.<mac>
// where <random> is the line's 32 random bytes (base64url), <address> the listener's advertised
// HOST:PORT (base64url) and <mac> the first 16 bytes of an HMAC-SHA256 over both (base64url),
// keyed by a key derived from the internal credential. An edge proxies a request to <address>
// only once the MAC verifies: a route anyone could write would let whoever reaches the edge
// aim it at any address. A token without a route (a process serving its lines on its own edge)
// is 43 characters, as before.
//
// Pure functions: no HTTP, no sockets.

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace calleval::runs {

// `random` followed by the route to `address`, MACed with the credential's first secret (the
// one a process sends: common/internal_credential.h).
std::string RoutedLineToken(absl::string_view random, absl::string_view address,
                            absl::string_view credential);

// The holder's HOST:PORT named by `token`'s route when its MAC verifies under one of the
// credential's secrets (so a rotation does not strand lines opened before it); nullopt for a
// token without a route, a malformed one or a forged one: the caller answers all of them as it
// answers an unknown token.
std::optional<std::string> VerifiedLineHolder(absl::string_view token,
                                              absl::string_view credential);

// The same for the token in a carrier-facing path, /media/<carrier>/<token>[/events|/answer].
std::optional<std::string> VerifiedLineHolderOfPath(absl::string_view path,
                                                    absl::string_view credential);

}  // namespace calleval::runs
