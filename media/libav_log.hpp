#pragma once
// FFmpeg's own log lines go through sluice's logger, never straight to stderr: error-level lines as warnings,
// warnings at debug level (when the logger is at debug), the rest dropped; each input's lines rate-limited on their own (a stream joined in the
// middle of a GOP makes the decoder complain hundreds of times a second), with a count of what was left out.
//
// Which input a line belongs to: the thread's current LibavLogScope (demuxing, opening and decoding run on the
// source's own thread), or, for lines from libavcodec's own frame threads, the decoder context's `opaque`
// (set to the input's LibavLog by the reader). A line with neither is limited with all such lines of the
// process, under the name "libav".
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace sluice {

class LibavLog {
 public:
  explicit LibavLog(std::string input) : input_(std::move(input)) {}
  LibavLog(const LibavLog&) = delete;
  LibavLog& operator=(const LibavLog&) = delete;

  // The last error-level line FFmpeg logged for this input, without its "[tcp @ 0x...]" prefix and without the
  // query of any URL in it (FFmpeg's inner options such as "?timeout=0", or a token of the input's own URL)
  // ("" when none): the detail a return code lacks ("Connection to tcp://cam:554 failed: Connection refused"
  // behind a plain "I/O error").
  std::string last_error() const;

  // The last error-level line the demuxer itself logged (libavformat's format context, not a protocol, parser or
  // decoder) for this input, opening included, without its prefix ("" when none): how a container tells that it
  // ended where its own structure says it goes on ("File ended prematurely"), which its return codes do not.
  std::string last_demuxer_error() const;

  // Takes one line (already UTF-8, no newline); `error`: FFmpeg logged it at error level or worse;
  // `from_demuxer`: the format context logged it.
  void take(const std::string& line, bool error, bool from_demuxer = false);

  // While held (opening an input), error lines are kept for last_error() and logged at debug level only: a
  // failure to open names the last one in its reason, which is logged once, not twice.
  void hold_errors(bool held) noexcept { hold_errors_.store(held, std::memory_order_relaxed); }

  // RTP packets libavformat found missing (sequence gaps) on this input so far. FFmpeg tells of them only in its
  // log ("RTP: missed N packets", from its reordering queue), so they are counted where its lines arrive.
  std::int64_t rtp_packets_missed() const noexcept { return rtp_packets_missed_.load(std::memory_order_relaxed); }
  void add_rtp_packets_missed(int n) noexcept { rtp_packets_missed_.fetch_add(n, std::memory_order_relaxed); }

  // The status of the last HTTP error reply FFmpeg's http protocol got for this input (0 when none). FFmpeg's
  // error code tells only its class (AVERROR_HTTP_OTHER_4XX, AVERROR_HTTP_SERVER_ERROR); the status itself is
  // in its log line ("HTTP error 429 Too Many Requests"), so it is read where its lines arrive.
  int http_status() const noexcept { return http_status_.load(std::memory_order_relaxed); }
  void set_http_status(int status) noexcept { http_status_.store(status, std::memory_order_relaxed); }

  // At most this many lines per window are logged for one input (its URI: the allowance outlives one
  // connection, so reconnection attempts share it); the rest are counted and reported with the next line.
  static constexpr int kLinesPerWindow = 5;
  static constexpr std::int64_t kWindowNs = 10'000'000'000;

 private:
  std::string input_;
  mutable std::mutex mu_;  // libavcodec's frame threads log concurrently
  std::string last_error_, last_demuxer_error_;
  std::atomic<std::int64_t> rtp_packets_missed_{0};
  std::atomic<int> http_status_{0};
  std::atomic<bool> hold_errors_{false};
};

// While it lives, what FFmpeg logs on this thread is `log`'s. Nests.
class LibavLogScope {
 public:
  explicit LibavLogScope(LibavLog& log) noexcept;
  ~LibavLogScope();
  LibavLogScope(const LibavLogScope&) = delete;
  LibavLogScope& operator=(const LibavLogScope&) = delete;

 private:
  LibavLog* previous_;
};

// Installs the callback (idempotent).
void route_libav_logging();

}  // namespace sluice
