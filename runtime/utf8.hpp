#pragma once
// UTF-8 checks for bytes that come from outside (file names, request fields, pipeline names): JSON replies
// and Prometheus labels must be valid UTF-8, and a name that is not must still be shown (and found again).
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(std::string_view s);

// `s` with each ill-formed sequence (its maximal subpart, as Unicode recommends) replaced by U+FFFD.
// Valid input comes back unchanged; the same input always gives the same output.
std::string to_valid_utf8(std::string_view s);

// Bytes that are not UTF-8 (a path can be any bytes) kept exactly in JSON: lowercase hex, two digits a byte
// (records and ledgers write it as "input_hex" beside the U+FFFD-shown "input"). from_hex: nullopt when `hex`
// is not an even number of hex digits.
std::string to_hex(std::string_view bytes);
std::optional<std::string> from_hex(std::string_view hex);

// An input's URI as logs and reasons show it: to_valid_utf8, and for a URL (scheme://...) its user info and its
// query and fragment hidden, which may hold credentials or tokens (a signed URL's):
// https://user:pw@host/a.mp4?sig=x#t -> https://***@host/a.mp4?***. A path is only made valid UTF-8.
std::string shown_uri(std::string_view uri);

}  // namespace sluice
