// sluicectl prints names and reasons from the daemon (any bytes a peer or a file system chose) escaped
// (runtime/printable.hpp, issue 33): no ESC sequence reaches the terminal, no newline forges a row.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/printable.hpp"

using sluice::printable;

TEST_CASE("sluicectl printable: printable UTF-8 passes unchanged", "[sluicectl][printable]") {
  CHECK(printable("") == "");
  CHECK(printable("cam7 /data/clip.mp4") == "cam7 /data/clip.mp4");
  CHECK(printable("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE6\x97\xA5") == "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE6\x97\xA5");
}

TEST_CASE("sluicectl printable: controls and invisible characters become visible escapes", "[sluicectl][printable]") {
  CHECK(printable("\x1b[2J\x1b]0;owned\x07") == "\\x1B[2J\\x1B]0;owned\\x07");
  CHECK(printable("a\nb\rc\td") == "a\\nb\\rc\\td");
  CHECK(printable("fake\n  99  admin  file  live") == "fake\\n  99  admin  file  live");
  CHECK(printable("back\\slash") == "back\\\\slash");  // so "\\x1B" text cannot pass for an escaped ESC
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("del\x7f") == "del\\x7F");
  CHECK(printable("\xC2\x9B" "31m") == "\\u{009B}31m");               // C1 CSI
  CHECK(printable("\xE2\x80\xAE" "4pm.exe") == "\\u{202E}4pm.exe");  // right-to-left override
  CHECK(printable("a\xE2\x80\x8B" "b") == "a\\u{200B}b");            // zero-width space
  CHECK(printable("line\xE2\x80\xA8" "sep") == "line\\u{2028}sep");
  CHECK(printable("\xEF\xBB\xBF" "bom") == "\\u{FEFF}bom");
  CHECK(printable("\xF3\xA0\x80\x81" "tag") == "\\u{E0001}tag");
}

TEST_CASE("sluicectl printable: bytes that are not UTF-8 are shown as bytes", "[sluicectl][printable]") {
  CHECK(printable("caf\xE9.mp4") == "caf\\xE9.mp4");
  CHECK(printable("\xC0\xAF") == "\\xC0\\xAF");          // overlong
  CHECK(printable("\xED\xA0\x80") == "\\xED\\xA0\\x80");  // surrogate
  CHECK(printable("\xE2\x82") == "\\xE2\\x82");          // truncated
  for (int b = 0; b < 256; ++b) {
    const std::string out = printable(std::string(1, static_cast<char>(b)));
    for (unsigned char c : out) CHECK((c >= 0x20 && c < 0x7f));  // one byte alone: always plain ASCII out
  }
}

TEST_CASE("printable: is_printable tells text that prints as itself", "[sluicectl][printable]") {
  CHECK(sluice::is_printable("cam7 caf\xC3\xA9 \xE6\x97\xA5 a\\b"));
  CHECK(sluice::is_printable(""));
  for (const char* bad : {"a\nb", "\x1b[2J", "a\tb", "\x7f", "x\xC2\x85", "\xE2\x80\xAEgpj", "\xE2\x80\x8B", "\xFF", "\xC3"})
    CHECK_FALSE(sluice::is_printable(bad));
}
