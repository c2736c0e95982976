// libFuzzer harness: the demux layer (media/demux.hpp) on arbitrary bytes in memory, in plain and in Annex-B
// mode (odd-sized inputs). The only outcomes allowed are InputError at open, and packets until end or an
// error with a reason; anything else escaping (or a crash, hang, or huge allocation) is a finding. Needs the
// media library: built by the asan preset, not by the fuzz preset.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <spdlog/spdlog.h>

#include "media/demux.hpp"
#include "runtime/frame_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);  // FFmpeg's lines still pass sluice's log routing, printed nowhere
    return true;
  }();
  (void)quiet;
  sluice::DemuxOptions options;
  options.annex_b = (size & 1) != 0;
  try {
    sluice::Demuxer demuxer(std::span<const std::uint8_t>(data, size), "fuzz", options);
    sluice::DemuxPacket packet;
    std::string why;
    sluice::DemuxStatus status = sluice::DemuxStatus::packet;
    for (int i = 0; i < 100000 && (status = demuxer.read(packet, why)) == sluice::DemuxStatus::packet; ++i)
      if (packet.data().size() > (std::size_t{1} << 30)) __builtin_trap();
    if (status == sluice::DemuxStatus::error && why.empty()) __builtin_trap();  // an error always says why
    if (demuxer.rotation() % 90 != 0 || demuxer.rotation() < 0 || demuxer.rotation() > 270) __builtin_trap();
  } catch (const sluice::InputError&) {
  }
  return 0;
}
