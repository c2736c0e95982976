#pragma once
// Text from outside (a source's name, a file name, a reason) made safe to print on a terminal or in a log: a name is
// any bytes a peer or a file system chose, and printed raw an ESC sequence would drive the terminal, a newline
// would forge a table row, a bidi override would reorder what is shown. Everything that is not printable comes
// out as a visible escape instead, so the text stays one unambiguous line.
#include <string>
#include <string_view>

namespace sluice {

// `text` with each character that is not printable written as an escape:
//   \n \r \t, \\ for a backslash, \xHH for other C0 controls, DEL and bytes that are not UTF-8,
//   \u{HHHH} for C1 controls and invisible format characters (bidi controls, zero-width characters,
//   U+2028/U+2029 line and paragraph separators, the BOM, soft hyphen, noncharacters, tags).
// Printable UTF-8 passes unchanged.
std::string printable(std::string_view text);

// Whether `text` is UTF-8 with no character that printable() escapes (a backslash aside): it prints as itself.
bool is_printable(std::string_view text);

}  // namespace sluice
