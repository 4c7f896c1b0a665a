#pragma once

// Request bodies the call-ingest route (POST /api/public/v1/calls, IngestCallRequest) must
// reject with a 4xx: malformed JSON (400) or well-formed JSON with ill-typed fields (422).
// Shared by the codec unit test and the HTTP integration test.

#include <string>
#include <vector>

namespace calleval::testdata {

// A valid ingest body; every strict prefix of it is malformed.
std::string ValidIngestBody();

// At least 250 distinct bodies, each malformed or ill-typed for IngestCallRequest: wrong types
// for every field of IngestCallRequest and Turn, truncations of ValidIngestBody(), huge
// numbers, 10k-deep nesting, invalid UTF-8, lone surrogates, NUL bytes, very long strings,
// non-object tops, duplicate keys and assorted syntax errors.
std::vector<std::string> GenerateBadBodies();

}  // namespace calleval::testdata
