// The sink's redis writer: each frame's record appended to a Redis stream with XADD (fields `record`: the
// jsonl record, `writer`: this run's id), a batch at a time in one Lua script (one round trip, atomic on the
// server). A frame counts as delivered once the script's reply came back: the server has the record (durable on
// its disk as far as its appendfsync policy makes it).
//
// Each record is written at most once, however often it is sent: the script appends a record only if its mark
// is not set yet, and sets the mark with it. A job input's frame is marked in a bitmap per input (its path and
// options, bit input_frame), so a redo of the input (after failed batches, a takeover by another worker, a
// resumed job) appends only the frames not in the stream yet; a frame without a job input (a camera, a
// stream) by this writer's greatest sequence number per source. A lost reply is therefore simply sent again.
//
// A lost connection is retried (reconnect with growing delays, the sink blocks and the pipeline backs up) until
// write_retry_s; then the batch's frames fail with the reason.
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <random>

#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/input_identity.hpp"
#include "runtime/redis_client.hpp"
#include "runtime/utf8.hpp"
#include "stages/sink_writers.hpp"

namespace sluice::sinks {
namespace {

std::string make_writer_id() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::mt19937_64 rng{std::random_device{}()};
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(rng()));
  return safe_name(host) + "-" + std::to_string(::getpid()) + "-" + suffix;
}

class RedisWriter final : public RecordWriter {
 public:
  RedisWriter(redis::RedisUri uri, std::uint64_t maxlen, WriteRetry& retry, std::string stage)
      : client_(uri.endpoint, uri.stream), stream_(uri.stream), maxlen_(maxlen), retry_(retry),
        stage_(std::move(stage)), writer_id_(make_writer_id()),
        marker_prefix_(uri.stream + ":sluice-writer:" + writer_id_ + ":") {}

  void open(const std::set<std::string>&) override {
    // A server that is not there yet is waited for at the first batch; one that refuses us fails now.
    try {
      client_.connect();
      const redis::Reply type = client_.checked({"TYPE", stream_});
      if (!type.is(redis::Reply::Type::status)) client_.wrong_type(type, "a status", "TYPE");
      if (type.str != "none" && type.str != "stream")
        throw StageError(client_.describe() + ": the key holds a " + type.str + ", not a stream");
    } catch (const redis::RedisError& e) {
      if (!e.transient()) throw StageError(e.what());
      spdlog::warn("stage '{}': {} (retried at the first batch)", stage_, e.what());
    }
  }

  void add(const FrameMeta& f, const Origin& origin, std::string_view record) override {
    Pending p;
    if (f.input != 0 && origin.tracked && !origin.live) {  // a job's input: a redo of it may send this frame again
      p.mark_key = input_mark_key(origin.uri, origin.options, f.input_frame >> 32);
      p.kind = "f";
      p.position = std::to_string(f.input_frame & 0xffffffffu);
    } else {
      p.mark_key = marker_prefix_ + std::to_string(f.source_id);
      p.kind = "s";
      p.position = std::to_string(f.sequence);
    }
    p.record = record;
    pending_.push_back(std::move(p));
  }

  void discard_pending() noexcept override { pending_.clear(); }

  void flush() override {
    if (pending_.empty()) return;
    std::vector<std::string> eval{"EVAL", kAppendOnceScript, std::to_string(pending_.size() + 1), stream_};
    eval.reserve(4 + pending_.size() * 4 + 4);
    for (const Pending& p : pending_) eval.push_back(p.mark_key);
    eval.insert(eval.end(), {writer_id_, std::to_string(maxlen_), std::to_string(kInputMarkTtlS),
                             std::to_string(kWriterMarkTtlS)});
    for (Pending& p : pending_) eval.insert(eval.end(), {p.kind, p.position, std::move(p.record)});
    const std::size_t records = pending_.size();
    pending_.clear();

    // The retry policy is the file sinks' (WriteRetry): a lost server blocks the sink and is retried until
    // write_retry_s; an error reply (a key of another type, NOAUTH) fails the batch at once. Sending the batch
    // again after a lost reply is safe: records already there are not appended again.
    retry_.run_attempts("writing", client_.describe(), [&]() -> std::optional<WriteRetry::Failure> {
      try {
        client_.connect();
        check_reply(client_.command(eval), records);
        return std::nullopt;
      } catch (const redis::RedisError& e) {
        return WriteRetry::Failure{!e.transient(), e.what()};
      }
    });
  }

  std::vector<std::string> finish(const InputProgress&) override { return {}; }  // every record is acked already

  void close() override { client_.disconnect(); }

 private:
  struct Pending {
    std::string mark_key, kind, position, record;
  };

  // Appends each record unless its mark says it is in the stream already; sets the mark with it (GETBIT before
  // XADD before SETBIT: a script cut short by an error never leaves a mark without its record). KEYS: the
  // stream, then each record's mark key; ARGV: writer id, maxlen (0: none), the input marks' and the writer
  // marks' lifetimes in s, then per record: kind (f: bit POSITION of an input's bitmap, s: a sequence number
  // above the writer's mark), position, record. Returns per record its new entry id, or "" when it was there.
  static constexpr const char* kAppendOnceScript = R"(-- sluice: append records once each
local out = {}
for r = 2, #KEYS do
  local key, at = KEYS[r], 5 + (r - 2) * 3
  local kind, pos, rec = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local fresh
  if kind == 'f' then
    fresh = redis.call('GETBIT', key, pos) == 0
  else
    local mark = redis.call('GET', key)
    fresh = (not mark) or #pos > #mark or (#pos == #mark and pos > mark)
  end
  if fresh then
    local id
    if ARGV[2] == '0' then
      id = redis.call('XADD', KEYS[1], '*', 'record', rec, 'writer', ARGV[1])
    else
      id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'record', rec, 'writer', ARGV[1])
    end
    if kind == 'f' then
      redis.call('SETBIT', key, pos, 1)
      redis.call('EXPIRE', key, ARGV[3])
    else
      redis.call('SET', key, pos, 'EX', ARGV[4])
    end
    out[#out + 1] = id
  else
    out[#out + 1] = ''
  end
end
return out)";
  // How long marks outlive their last write: an input redone within a week appends only what is missing; a
  // writer's marks only matter while it runs (a retry of its own batch).
  static constexpr std::int64_t kInputMarkTtlS = 7 * 86400, kWriterMarkTtlS = 86400;

  // <stream>:sluice-written:<SHA-256 of the input's path and options>[:<chunk>] (a bitmap holds 2^32 bits).
  std::string input_mark_key(const std::string& input, const std::string& options, std::uint64_t chunk) const {
    std::string key = stream_ + ":sluice-written:" + input_identity(input, options);
    if (chunk > 0) key += ":" + std::to_string(chunk);
    return key;
  }

  // The script's reply: one entry id (appended now) or "" (there already) per record.
  void check_reply(const redis::Reply& reply, std::size_t records) {
    if (reply.is(redis::Reply::Type::error))
      throw redis::RedisError(redis::RedisError::Kind::server,
                              client_.describe() + ": XADD: " + to_valid_utf8(reply.str.substr(0, 200)));
    if (!reply.is(redis::Reply::Type::array) || reply.elements.size() != records)
      client_.wrong_type(reply, "an array of one reply per record", "EVAL (XADD)");
    for (const redis::Reply& id : reply.elements)
      if (!id.is(redis::Reply::Type::string) || (!id.str.empty() && !redis::valid_entry_id(id.str)))
        client_.wrong_type(id, "an entry id", "EVAL (XADD)");
  }

  redis::Client client_;
  std::string stream_;
  std::uint64_t maxlen_;
  WriteRetry& retry_;
  std::string stage_;
  std::string writer_id_, marker_prefix_;
  std::vector<Pending> pending_;
};

}  // namespace

std::unique_ptr<RecordWriter> make_redis_writer(const std::string& uri, std::uint64_t maxlen, WriteRetry& retry,
                                                std::string stage) {
  redis::RedisUri parsed;
  try {
    parsed = redis::parse_redis_uri(uri);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("type redis: 'path' must be redis://host:port/STREAM: ") + e.what());
  }
  if (!parsed.endpoint.password.empty())
    throw ConfigError("type redis: put the password in the environment (SLUICE_REDIS_PASSWORD), not in the "
                      "pipeline file");
  if (!parsed.query.empty()) throw ConfigError("type redis: 'path' takes no ?options (use maxlen)");
  if (const char* password = std::getenv("SLUICE_REDIS_PASSWORD")) parsed.endpoint.password = password;
  return std::make_unique<RedisWriter>(std::move(parsed), maxlen, retry, std::move(stage));
}

}  // namespace sluice::sinks
