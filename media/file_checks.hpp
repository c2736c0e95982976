#pragma once
// Checks a local input path before any decoder touches it.
#include <string>

namespace sluice {

// `uri` must exist as a readable, non-empty regular file; throws InputError ("'URI': reason") otherwise.
// Anything but a regular file could block a decode thread forever (a FIFO waits for a writer) or never end
// (/dev/zero).
void check_readable_file(const std::string& uri);

}  // namespace sluice
