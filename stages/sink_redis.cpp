// The sink's redis writer: each frame's record appended to a Redis stream with XADD (fields `record`: the
// jsonl record, `writer`: this run's id), a batch at a time in one MULTI/EXEC sent pipelined (one round trip),
// so a batch lands whole or not at all. A frame counts as delivered once EXEC's reply came back: the server
// has the record (durable on its disk as far as its appendfsync policy makes it).
//
// A lost connection is retried (reconnect with growing delays, the sink blocks and the pipeline backs up) until
// write_retry_s; then the batch's frames fail with the reason. Exactly once across a reconnect: the same
// MULTI sets `<stream>:sluice-writer:<writer id>` to the batch's number, so after a connection lost while
// waiting for EXEC's reply the writer reads it back and resends only a batch the server did not apply.
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <random>

#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
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
        marker_key_(uri.stream + ":sluice-writer:" + writer_id_) {}

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

  void add(const FrameMeta&, const Origin&, std::string_view record) override { pending_.emplace_back(record); }

  void discard_pending() noexcept override { pending_.clear(); }

  void flush() override {
    if (pending_.empty()) return;
    const std::uint64_t batch = ++batch_no_;
    std::vector<std::vector<std::string>> commands;
    commands.reserve(pending_.size() + 3);
    commands.push_back({"MULTI"});
    for (auto& record : pending_) {
      std::vector<std::string> xadd{"XADD", stream_};
      if (maxlen_ > 0) xadd.insert(xadd.end(), {"MAXLEN", "~", std::to_string(maxlen_)});
      xadd.insert(xadd.end(), {"*", "record", std::move(record), "writer", writer_id_});
      commands.push_back(std::move(xadd));
    }
    pending_.clear();
    commands.push_back({"SET", marker_key_, std::to_string(batch), "EX", "86400"});
    commands.push_back({"EXEC"});

    // The retry policy is the file sinks' (WriteRetry): a lost server blocks the sink and is retried until
    // write_retry_s; an error reply (a key of another type, NOAUTH) fails the batch at once.
    bool uncertain = false;  // sent, connection lost before EXEC's reply: it may have been applied
    retry_.run_attempts("writing", client_.describe(), [&]() -> std::optional<WriteRetry::Failure> {
      try {
        if (uncertain && applied(batch)) return std::nullopt;
        uncertain = false;
        client_.connect();
        uncertain = true;
        const auto replies = client_.pipeline(commands);
        uncertain = false;
        check_exec(replies, commands.size() - 3);
        return std::nullopt;
      } catch (const redis::RedisError& e) {
        return WriteRetry::Failure{!e.transient(), e.what()};
      }
    });
  }

  std::vector<std::string> finish(const InputProgress&) override { return {}; }  // every record is acked already

  void close() override { client_.disconnect(); }

 private:
  // After a reconnect: did the server apply batch `batch` (its marker says so)?
  bool applied(std::uint64_t batch) {
    client_.connect();
    const redis::Reply r = client_.checked({"GET", marker_key_});
    if (r.is(redis::Reply::Type::nil)) return false;
    if (!r.is(redis::Reply::Type::string)) client_.wrong_type(r, "a bulk string", "GET");
    return r.str == std::to_string(batch);
  }

  // MULTI's +OK, a +QUEUED per command, then EXEC's array: an entry id per XADD and SET's +OK.
  void check_exec(const std::vector<redis::Reply>& replies, std::size_t records) {
    for (std::size_t i = 0; i + 1 < replies.size(); ++i)
      if (replies[i].is(redis::Reply::Type::error))
        throw redis::RedisError(redis::RedisError::Kind::server,
                                client_.describe() + ": XADD: " + to_valid_utf8(replies[i].str.substr(0, 200)));
    const redis::Reply& exec = replies.back();
    if (exec.is(redis::Reply::Type::error))
      throw redis::RedisError(redis::RedisError::Kind::server,
                              client_.describe() + ": EXEC: " + to_valid_utf8(exec.str.substr(0, 200)));
    if (!exec.is(redis::Reply::Type::array) || exec.elements.size() != records + 1)
      client_.wrong_type(exec, "an array of one reply per command", "EXEC");
    for (std::size_t i = 0; i < records; ++i) {
      const redis::Reply& id = exec.elements[i];
      if (id.is(redis::Reply::Type::error))
        throw redis::RedisError(redis::RedisError::Kind::server,
                                client_.describe() + ": XADD: " + to_valid_utf8(id.str.substr(0, 200)));
      if (!id.is(redis::Reply::Type::string) || !redis::valid_entry_id(id.str))
        client_.wrong_type(id, "an entry id", "XADD");
    }
  }

  redis::Client client_;
  std::string stream_;
  std::uint64_t maxlen_;
  WriteRetry& retry_;
  std::string stage_;
  std::string writer_id_, marker_key_;
  std::uint64_t batch_no_ = 0;
  std::vector<std::string> pending_;
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
