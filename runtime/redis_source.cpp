#include "runtime/redis_source.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "runtime/input_identity.hpp"
#include "runtime/inputs.hpp"
#include "runtime/source_kind.hpp"
#include "runtime/redis_group_replies.hpp"
#include "runtime/redis_job_scripts.hpp"
#include "runtime/stats.hpp"
#include "runtime/thread_name.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace {

using redis::Reply;
using redis::RedisError;

// Text from outside as a message may show it: UTF-8, bounded.
std::string shown(std::string_view s, std::size_t max = 200) {
  std::string out = to_valid_utf8(s.substr(0, max));
  if (s.size() > max) out += "...";
  return out;
}

template <typename T>
T number_option(const std::string& key, const std::string& value, T lo, T hi) {
  T v{};
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || !(v >= lo && v <= hi))
    throw std::invalid_argument("option '" + key + "' must be a number in " + std::to_string(lo) + ".." +
                                std::to_string(hi) + ", got '" + shown(value, 40) + "'");
  return v;
}

bool bool_option(const std::string& key, const std::string& value) {
  if (value == "1" || value == "true" || value == "yes" || value.empty()) return true;
  if (value == "0" || value == "false" || value == "no") return false;
  throw std::invalid_argument("option '" + key + "' must be true or false, got '" + shown(value, 40) + "'");
}

std::string default_consumer() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) std::snprintf(host, sizeof host, "host");
  return std::string(host) + "-" + std::to_string(::getpid());
}

// The longest a live worker goes between two attempts to reach a lost server (the client's reconnection backoff
// is at most 2 s, the feed's pause after an error reply such as LOADING at most this): after an outage, workers
// cut off with this one are back within it.
constexpr double kMaxRetryDelayS = redis::kMaxRetryDelayMs / 1000.0;
// Trimming after acknowledgements, at most this often.
constexpr std::int64_t kTrimIntervalNs = 1'000'000'000;

class RedisFeed final : public InputFeed {
 public:
  explicit RedisFeed(RedisSourceOptions o)
      : o_(std::move(o)), client_(o_.uri.endpoint, o_.uri.stream) {
    thread_ = std::thread([this] { run(); });
  }
  ~RedisFeed() override {
    stop_flag_ = true;  // ends a reconnection's backoff
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    ready_.notify_all();
    answered_.notify_all();
    thread_.join();
  }

  Poll next(FedInput& input, std::chrono::milliseconds wait) override {
    std::unique_lock lock(mu_);
    ready_.wait_for(lock, wait, [&] { return !buffered_.empty() || ended_ || stop_; });
    if (!buffered_.empty()) {
      Held h = std::move(buffered_.front());
      buffered_.pop_front();
      input = {h.input, h.kind, h.options};
      ++h.deliveries;
      attempt_marks_.emplace_back(h.id, "run");  // counted before it runs (one that kills the worker counts too)
      in_flight_.emplace(std::make_pair(h.input, h.options.text()), h);
      wake_.notify_all();  // room to read more
      return Poll::input;
    }
    return ended_ || stop_ ? Poll::ended : Poll::idle;
  }

  void settled(const InputResult& r) override {
    {
      std::lock_guard lock(mu_);
      auto it = in_flight_.find(std::make_pair(r.uri, r.options));
      if (it == in_flight_.end()) return;  // not one of ours (or settled already)
      Held h = std::move(it->second);
      in_flight_.erase(it);
      if (h.lost) {
        spdlog::info("{}: entry {} ('{}') is left to the consumer that took it over", client_.describe(), h.id,
                     shown(shown_uri(h.input)));
        return;
      }
      switch (r.outcome) {
        case InputOutcome::done: {
          Settle done{h.id, h.input, {}, h.deliveries, false, h.options.text()};
          done.skipped = r.earlier;
          outbox_.push_back(std::move(done));
          break;
        }
        case InputOutcome::failed: {
          std::string reason = r.reason;
          if (r.transient)  // it may have passed, but no attempt is left (retries() said so)
            reason += " (attempt " + std::to_string(h.deliveries) + " of max_deliveries " +
                      std::to_string(o_.max_deliveries) + ")";
          outbox_.push_back({h.id, h.input, std::move(reason), h.deliveries, true, h.options.text()});
          break;
        }
        case InputOutcome::retry:
          // Left pending and no longer kept alive: once idle for its retry wait a consumer of the group takes it
          // again (claim()).
          remember_failure(h.id, r.reason);
          attempt_marks_.emplace_back(h.id, "left");
          spdlog::warn("{}: entry {} ('{}') not committed ({}); left pending for a retry after {:g} s (attempt {} of "
                       "max_deliveries {})", client_.describe(), h.id, shown(shown_uri(h.input)), shown(r.reason),
                       retry_wait_ms(h.deliveries) / 1000.0, h.deliveries, o_.max_deliveries);
          break;
      }
    }
    wake_.notify_all();
  }

  // Asks the feed's thread (the connection is its own) to check the entry and keep it for the commit.
  bool still_ours(const std::string& uri, const std::string& options) override {
    auto ask = std::make_shared<Confirmation>();
    {
      std::unique_lock lock(mu_);
      auto it = in_flight_.find(std::make_pair(uri, options));
      if (it == in_flight_.end()) return true;  // not one of ours
      if (it->second.lost) return false;
      ask->id = it->second.id;
      confirmations_.push_back(ask);
    }
    wake_.notify_all();
    std::unique_lock lock(mu_);
    // While the server is away this waits (the commit waits, like the acknowledgements), unless the source is
    // stopping: then it answers no (the input is not committed and is done again) rather than hold up a drain.
    answered_.wait(lock, [&] { return ask->answered || stop_ || thread_done_ || (stopping_ && !trouble_.empty()); });
    return ask->answered && ask->ours;
  }

  // A transient failure of an input in progress: tried again while attempts are left (max_deliveries).
  bool retries(const std::string& uri, const std::string& options) override {
    std::lock_guard lock(mu_);
    auto it = in_flight_.find(std::make_pair(uri, options));
    return it != in_flight_.end() && !it->second.lost && it->second.deliveries < o_.max_deliveries;
  }

  void stopping() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    answered_.notify_all();
  }

  std::string trouble() const override {
    std::lock_guard lock(mu_);
    return trouble_;
  }
  std::string failure() const override {
    std::lock_guard lock(mu_);
    return failure_;
  }

 private:
  struct Held {
    std::string id, input;
    InputKind kind = InputKind::file;
    std::int64_t deliveries = 0;  // attempts before this one
    InputOptions options;  // the entry's fields besides `input`
    bool lost = false;     // another consumer took it over, or acknowledged it: not ours to commit
  };
  struct Confirmation {  // still_ours() waiting for the feed's thread (fields under mu_)
    std::string id;
    bool answered = false, ours = false;
  };
  struct Settle {
    std::string id, input, reason;
    std::int64_t deliveries = 1;
    bool dead = false;
    std::string options;            // the entry's options (InputOptions::text(); dead letters: or as given)
    bool options_rejected = false;  // dead letters: the options were the reason
    bool skipped = false;           // done in an earlier run: acknowledged, counted as skipped
  };

  void run() {
    name_this_thread(kSourceThreadName);  // counted with the sources' threads
    const double interval_s = std::max(0.05, o_.claim_idle_s / 4);
    std::int64_t next_heartbeat = 0, next_claim = 0;
    bool group_ready = false, history_done = false, warned = false;
    std::int64_t outage_since = 0;  // when the server was lost (0: it is there)
    std::int64_t next_trim = 0, next_forget = 0;
    bool untrimmed = false;  // acknowledged since the last trim
    double retry_delay = 0.1;
    while (!stop_requested()) {
      try {
        if (!client_.connected()) {
          group_ready = false;
          const std::int64_t tried = now_ns();
          if (!client_.connect_with_backoff(std::chrono::steady_clock::time_point::max(), &stop_flag_)) break;
          if (outage_since == 0 && now_ns() - tried > 1'000'000'000) outage_since = tried;  // waited for it
        }
        if (!group_ready) {
          create_group();
          group_ready = true;
          next_heartbeat = 0;  // after an outage, the held entries' idle time is reset first
          if (outage_since != 0) after_outage((now_ns() - outage_since) / 1e9);
          outage_since = 0;
          if (warned) spdlog::info("{}: connected again", client_.describe());
          warned = false;
          retry_delay = 0.1;
          set_trouble({});
        }
        record_attempts();
        answer_confirmations();
        untrimmed = flush_outbox() || untrimmed;
        if (untrimmed && now_ns() >= next_trim) {
          trim();
          untrimmed = false;
          next_trim = now_ns() + kTrimIntervalNs;
        }
        if (!history_done) {
          read_history();
          history_done = true;
        }
        const std::int64_t now = now_ns();
        if (now >= next_heartbeat) {
          heartbeat();
          next_heartbeat = now + static_cast<std::int64_t>(interval_s * 1e9);
        }
        bool got = false;
        // Looked for often (claim_idle_s/10), so a dead worker's entries are taken over soon after they went
        // idle for claim_idle_s: failover within 1.1 claim_idle_s (plus block_ms while this one was idle).
        if (room() > 0 && now >= next_claim && now >= claim_not_before_) {
          got = claim(room()) || got;
          next_claim = now + static_cast<std::int64_t>(std::max(0.05, o_.claim_idle_s / 10) * 1e9);
          if (now >= next_forget) {
            forget_dead_consumers();
            next_forget = now + static_cast<std::int64_t>(o_.claim_idle_s * 1e9);
          }
        }
        // While inputs are out, no blocking read: an outcome is acknowledged the moment it is known (the
        // shorter that gap, the less a kill -9 leaves committed but unacknowledged, to be redone elsewhere).
        const bool busy = holding() || outbox_size() > 0;
        if (room() > 0) got = read_new(room(), busy ? 0 : o_.block_ms) || got;
        if (busy && !got) {
          std::unique_lock lock(mu_);
          wake_.wait_for(lock, std::chrono::milliseconds(50),
                         [&] { return stop_ || !outbox_.empty() || !confirmations_.empty(); });
        }
        if (o_.until_empty && !got && !holding() && outbox_size() == 0 && group_pending() == 0) {
          spdlog::info("{}: group '{}' has no new or pending entries: the job is done", client_.describe(),
                       shown(o_.group));
          if (untrimmed) trim();
          std::lock_guard lock(mu_);
          ended_ = true;
          break;
        }
      } catch (const RedisError& e) {
        client_.disconnect();
        if (outage_since == 0) outage_since = now_ns();
        if (e.kind() == RedisError::Kind::server && is_permanent(e.what())) {
          give_up(e.what());
          break;
        }
        if (!warned) spdlog::warn("{} (retrying; held entries and acknowledgements wait)", e.what());
        warned = true;
        set_trouble(e.what());
        if (e.kind() != RedisError::Kind::connection) {  // connection errors wait in connect_with_backoff
          sleep_for(retry_delay);
          retry_delay = std::min(retry_delay * 2, kMaxRetryDelayS);
        }
      } catch (const std::exception& e) {
        give_up(std::string("redis source: ") + e.what());
        break;
      }
    }
    // Stopping: what is settled already is acknowledged now if the server is there (one try); holding nothing,
    // this consumer leaves the group (its counts stay in the stats).
    try {
      if (client_.connected()) {
        record_attempts();
        if (outbox_size() > 0) flush_outbox();
        if (outbox_size() == 0 && !holding()) {
          const Reply left =
              client_.checked({"EVAL", redis_job::kLeaveScript, "2", o_.uri.stream, alive_key_, o_.group, o_.consumer});
          if (!(left.is(Reply::Type::integer) && left.integer == 1))
            spdlog::info("{}: consumer '{}' stays in group '{}': entries are still pending on it", client_.describe(),
                         shown(o_.consumer), shown(o_.group));
        } else {
          spdlog::info("{}: consumer '{}' stays in group '{}': {} acknowledgement(s) unsent, {} entr(ies) held",
                       client_.describe(), shown(o_.consumer), shown(o_.group), outbox_size(), holding() ? "some" : "no");
        }
      } else {
        spdlog::info("{}: consumer '{}' stays in group '{}': the server is not connected at stop", client_.describe(),
                     shown(o_.consumer), shown(o_.group));
      }
    } catch (const std::exception& e) {
      spdlog::warn("{}: {} acknowledgement(s) not sent at stop ({}); those entries are taken over after {} s",
                   client_.describe(), outbox_size(), e.what(), o_.claim_idle_s);
    }
    {
      std::lock_guard lock(mu_);
      thread_done_ = true;  // nobody answers still_ours() any more
    }
    ready_.notify_all();
    answered_.notify_all();
  }

  // Back after an outage of `outage_s`: every entry held anywhere went idle meanwhile, also those of workers
  // that were merely cut off along with this one. Those reconnect within the outage's length (they retry as
  // this one did) plus their longest pause between attempts, and keep their entries alive at once; entries
  // still idle after that are a dead worker's. Until then, nothing is taken over.
  void after_outage(double outage_s) {
    const double grace_s = std::min(outage_s, o_.claim_idle_s) + kMaxRetryDelayS;
    claim_not_before_ = now_ns() + static_cast<std::int64_t>(grace_s * 1e9);
    if (outage_s >= o_.claim_idle_s)
      spdlog::info("{}: the server was away {:.1f} s (claim_idle_s {} s): idle entries are taken over only after "
                   "{:.1f} s more, once workers cut off with this one had the time to come back",
                   client_.describe(), outage_s, o_.claim_idle_s, grace_s);
  }

  // still_ours() questions: each entry is checked and, when still ours, kept for its commit (one round trip).
  void answer_confirmations() {
    std::vector<std::shared_ptr<Confirmation>> asked;
    {
      std::lock_guard lock(mu_);
      asked = confirmations_;
    }
    if (asked.empty()) return;
    std::vector<std::vector<std::string>> commands;
    for (const auto& a : asked)
      commands.push_back({"EVAL", redis_job::kKeepIfOursScript, "1", o_.uri.stream, o_.group, a->id, o_.consumer});
    const auto replies = client_.pipeline(commands);
    std::vector<bool> ours(asked.size());
    for (std::size_t i = 0; i < asked.size(); ++i) {
      if (replies[i].is(Reply::Type::error))
        throw RedisError(RedisError::Kind::server, client_.describe() + ": checking entry " + asked[i]->id +
                                                       " before its commit: " + shown(replies[i].str));
      if (!replies[i].is(Reply::Type::integer) || (replies[i].integer != 0 && replies[i].integer != 1))
        client_.wrong_type(replies[i], "0 or 1", "EVAL (XPENDING, XCLAIM)");
      ours[i] = replies[i].integer == 1;
    }
    {
      std::lock_guard lock(mu_);
      for (std::size_t i = 0; i < asked.size(); ++i) {
        asked[i]->answered = true;
        asked[i]->ours = ours[i];
        if (!ours[i]) {
          mark_lost(asked[i]->id);
          spdlog::warn("{}: entry {} was taken over by another consumer (or acknowledged elsewhere) while held "
                       "here: its outputs are not committed here", client_.describe(), asked[i]->id);
        }
      }
      confirmations_.erase(confirmations_.begin(), confirmations_.begin() + static_cast<std::ptrdiff_t>(asked.size()));
    }
    answered_.notify_all();
  }

  // An entry held here is another consumer's now: one not started yet is dropped, one in progress is finished
  // but not committed (still_ours() says no). mu_ held.
  void mark_lost(const std::string& id) {
    std::erase_if(buffered_, [&](const Held& h) { return h.id == id; });
    for (auto& [key, h] : in_flight_)
      if (h.id == id) h.lost = true;
  }

  static bool is_permanent(std::string_view what) {
    return what.find("WRONGTYPE") != std::string_view::npos || what.find("NOAUTH") != std::string_view::npos ||
           what.find("WRONGPASS") != std::string_view::npos || what.find("AUTH refused") != std::string_view::npos ||
           what.find("NOPERM") != std::string_view::npos;
  }

  void give_up(const std::string& why) {
    spdlog::error("{}", why);
    std::lock_guard lock(mu_);
    failure_ = why;
    trouble_ = why;
    ended_ = true;
  }

  void create_group() {
    const Reply r = client_.command({"XGROUP", "CREATE", o_.uri.stream, o_.group, "0", "MKSTREAM"});
    if (r.is(Reply::Type::error) && r.str.rfind("BUSYGROUP", 0) != 0)
      throw RedisError(RedisError::Kind::server, client_.describe() + ": XGROUP CREATE '" + shown(o_.group) + "': " + shown(r.str));
  }

  // Entries still pending for this consumer name from before (a restart under the same name, a reload).
  void read_history() {
    std::string from = "0";
    for (;;) {
      const Reply r = client_.checked({"XREADGROUP", "GROUP", o_.group, o_.consumer, "COUNT", "100", "STREAMS",
                                       o_.uri.stream, from});
      auto entries = redis::parse_xreadgroup(r, client_.describe() + ": XREADGROUP (pending)");
      if (entries.empty()) return;
      from = entries.back().id;
      admit(std::move(entries), /*fresh=*/false);
    }
  }

  bool read_new(std::size_t n, int block_ms) {  // block_ms 0: do not wait
    std::vector<std::string> args{"XREADGROUP", "GROUP", o_.group, o_.consumer, "COUNT", std::to_string(n)};
    if (block_ms > 0) args.insert(args.end(), {"BLOCK", std::to_string(block_ms)});
    args.insert(args.end(), {"STREAMS", o_.uri.stream, ">"});
    const Reply r = client_.checked(args);
    auto entries = redis::parse_xreadgroup(r, client_.describe() + ": XREADGROUP");
    if (entries.empty()) return false;
    admit(std::move(entries), /*fresh=*/true);
    return true;
  }

  // How long an entry left for a retry after `attempts` attempts stays idle before it is taken again: claim_idle_s,
  // doubling with each further attempt (a server that fails for a while is asked less and less often), at most
  // 64 times claim_idle_s.
  std::int64_t retry_wait_ms(std::int64_t attempts) const {
    const int doublings = static_cast<int>(std::clamp<std::int64_t>(attempts - 1, 0, 6));
    return static_cast<std::int64_t>(o_.claim_idle_s * 1000) << doublings;
  }

  // Entries idle longer than claim_idle_s on any consumer (a dead one's, or ours left for a retry): found by the
  // server's filter over the whole pending list (XPENDING IDLE), then claimed with the same minimum idle time
  // (XCLAIM checks it again: an entry kept alive meanwhile stays where it is). An entry left for a retry after
  // more than one attempt waits longer (retry_wait_ms: its attempts say how many); a dead worker's entry (its
  // attempt still `run`) does not. A wider window than `n` is looked at, so entries waiting out their retry wait
  // do not hide the others.
  bool claim(std::size_t n) {
    const std::string idle_ms = std::to_string(static_cast<std::int64_t>(o_.claim_idle_s * 1000));
    const auto idle = redis::parse_xpending_entries(
        client_.checked({"XPENDING", o_.uri.stream, o_.group, "IDLE", idle_ms, "-", "+",
                         std::to_string(std::max<std::size_t>(n, 64))}),
        client_.describe() + ": XPENDING IDLE");
    if (idle.empty()) return false;
    std::vector<std::string> hmget{"HMGET", attempts_key_};
    for (const auto& e : idle) hmget.push_back(e.id);
    const Reply attempts = client_.checked(hmget);
    if (!attempts.is(Reply::Type::array) || attempts.elements.size() != idle.size())
      client_.wrong_type(attempts, "an array of one value per entry", "HMGET");
    std::vector<std::string> xclaim{"XCLAIM", o_.uri.stream, o_.group, o_.consumer, idle_ms};
    for (std::size_t i = 0; i < idle.size() && xclaim.size() - 5 < n; ++i) {
      if (attempts.elements[i].is(Reply::Type::string))
        if (const auto a = redis::parse_attempt(attempts.elements[i].str);
            a && !a->running && idle[i].idle_ms < retry_wait_ms(a->count))
          continue;  // left for a retry, still waiting
      xclaim.push_back(idle[i].id);
    }
    if (xclaim.size() == 5) return false;
    auto entries = redis::parse_entries(client_.checked(xclaim), client_.describe() + ": XCLAIM");
    if (entries.empty()) return false;
    spdlog::info("{}: took over {} entr{} idle for more than {} s", client_.describe(), entries.size(),
                 entries.size() == 1 ? "y" : "ies", o_.claim_idle_s);
    admit(std::move(entries), /*fresh=*/false);
    return true;
  }

  void forget_dead_consumers() {
    const Reply r = client_.command({"EVAL", redis_job::kForgetDeadScript, "2", o_.uri.stream, alive_key_, o_.group, o_.consumer,
                                     std::to_string(static_cast<std::int64_t>(o_.claim_idle_s * 1000)),
                                     std::to_string(redis::kMaxRetryDelayMs)});
    if (r.is(Reply::Type::error)) {  // housekeeping: the job goes on without it
      spdlog::warn("{}: removing dead consumers: {}", client_.describe(), shown(r.str));
      return;
    }
    if (!r.is(Reply::Type::integer)) client_.wrong_type(r, "an integer", "EVAL (XGROUP DELCONSUMER)");
    if (r.integer > 0)
      spdlog::info("{}: removed {} dead consumer(s) that held nothing from group '{}'", client_.describe(), r.integer,
                   shown(o_.group));
  }

  // Attempts begun and left since the last call, counted on the server in order (one round trip).
  void record_attempts() {
    std::vector<std::pair<std::string, std::string>> marks;
    {
      std::lock_guard lock(mu_);
      marks.assign(attempt_marks_.begin(), attempt_marks_.end());
    }
    if (marks.empty()) return;
    std::vector<std::vector<std::string>> commands;
    for (const auto& [id, state] : marks)
      commands.push_back({"EVAL", redis_job::kAttemptScript, "1", attempts_key_, id, state, o_.consumer});
    const auto replies = client_.pipeline(commands);
    for (std::size_t i = 0; i < replies.size(); ++i)
      if (replies[i].is(Reply::Type::error))
        throw RedisError(RedisError::Kind::server, client_.describe() + ": counting an attempt of entry " +
                                                       marks[i].first + ": " + shown(replies[i].str));
    std::lock_guard lock(mu_);
    attempt_marks_.erase(attempt_marks_.begin(), attempt_marks_.begin() + static_cast<std::ptrdiff_t>(marks.size()));
  }

  // "SIZE MTIME_NS" of a local file, "-" for a URL, "" when it cannot be read (then it is not known done).
  static std::string file_stamp(const std::string& input) {
    if (input.empty() || input.front() != '/') return "-";
    struct stat st{};
    if (::stat(input.c_str(), &st) != 0) return {};
    return std::to_string(st.st_size) + " " +
           std::to_string(static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec);
  }

  // Which entries name an input the group has done already, unchanged since (their identity recorded with the
  // file's stamp then and now the same).
  std::vector<bool> done_by_group(const std::vector<redis::StreamEntry>& entries) {
    std::vector<bool> done(entries.size(), false);
    std::vector<std::size_t> asked;
    std::vector<std::string> hmget{"HMGET", done_key_};
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const std::string* input = entries[i].field("input");
      InputOptions options;
      if (!input || !read_options(entries[i], options).empty()) continue;  // dead-lettered below
      asked.push_back(i);
      hmget.push_back(input_identity(*input, options.text()));
    }
    if (asked.empty()) return done;
    const Reply r = client_.checked(hmget);
    if (!r.is(Reply::Type::array) || r.elements.size() != asked.size())
      client_.wrong_type(r, "an array of one value per input", "HMGET");
    for (std::size_t k = 0; k < asked.size(); ++k) {
      if (!r.elements[k].is(Reply::Type::string)) continue;
      const std::string stamp = file_stamp(*entries[asked[k]].field("input"));
      done[asked[k]] = !stamp.empty() && r.elements[k].str == stamp;
    }
    return done;
  }

  // New entries (fresh: delivered once) or re-delivered ones (their delivery count asked for): held for the
  // decode threads, or dead-lettered (too many deliveries, no usable input), or acknowledged as skipped (done
  // by the group already).
  void admit(std::vector<redis::StreamEntry> entries, bool fresh) {
    const std::vector<bool> done = done_by_group(entries);
    // Attempts made so far (0 for a fresh entry): an entry read ahead and never started does not count.
    std::vector<std::int64_t> attempts(entries.size(), 0);
    if (!fresh && !entries.empty()) {
      std::vector<std::string> hmget{"HMGET", attempts_key_};
      for (const auto& e : entries) hmget.push_back(e.id);
      const Reply r = client_.checked(hmget);
      if (!r.is(Reply::Type::array) || r.elements.size() != entries.size())
        client_.wrong_type(r, "an array of one value per entry", "HMGET");
      for (std::size_t i = 0; i < entries.size(); ++i)
        if (r.elements[i].is(Reply::Type::string))
          if (const auto a = redis::parse_attempt(r.elements[i].str)) attempts[i] = a->count;
    }
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      auto& e = entries[i];
      if (holds(e.id)) continue;  // ours already (history after a reconnect)
      Held h{e.id, {}, InputKind::file, attempts[i]};
      const std::string* input = e.field("input");
      if (input) h.input = *input;
      const std::string bad_options = read_options(e, h.options);
      std::optional<std::string> why;
      if (h.deliveries >= o_.max_deliveries) {
        why = "attempted " + std::to_string(h.deliveries) + " times, max_deliveries " + std::to_string(o_.max_deliveries);
        if (auto f = failures_.find(e.id); f != failures_.end()) *why += " (last attempt: " + f->second + ")";
      } else if (!input) {
        why = "the entry has no field 'input' (the path or URL of the input)";
      } else if (!bad_options.empty()) {
        why = bad_options;  // never run an input other than as asked
      } else {
        why = reject_input(h.input, h.kind);
      }
      if (why) {
        spdlog::warn("{}: entry {} ('{}') goes to the dead letters '{}': {}", client_.describe(), e.id,
                     shown(shown_uri(h.input)), shown(o_.dead), *why);
        Settle dead{h.id, h.input, *why, h.deliveries, true, h.options.text()};
        if (!bad_options.empty()) {
          dead.options = given_options(e);
          dead.options_rejected = true;
        }
        outbox_.push_back(std::move(dead));
        continue;
      }
      if (done[i]) {
        spdlog::info("{}: entry {} ('{}') was done by the group already (same file, same options): acknowledged as "
                     "skipped", client_.describe(), e.id, shown(shown_uri(h.input)));
        Settle skipped{h.id, h.input, {}, h.deliveries, false, h.options.text()};
        skipped.skipped = true;
        outbox_.push_back(std::move(skipped));
        continue;
      }
      buffered_.push_back(std::move(h));
    }
    ready_.notify_all();
  }

  // The entry's fields besides `input` as the input's own options; "" or why it cannot be run as asked.
  static std::string read_options(const redis::StreamEntry& e, InputOptions& options) {
    std::set<std::string_view> seen;
    for (const auto& [name, value] : e.fields) {
      if (name == "input") continue;
      if (!seen.insert(name).second) return "the entry has the field '" + shown(name, 80) + "' twice";
      if (std::string why = options.set(name, value); !why.empty()) return "the entry's " + why;
    }
    return {};
  }

  // The entry's fields besides `input` as given ("name=value ...", shown as valid UTF-8, bounded): for the dead
  // letter of an entry whose options were refused.
  static std::string given_options(const redis::StreamEntry& e) {
    std::string out;
    for (const auto& [name, value] : e.fields) {
      if (name == "input") continue;
      if (!out.empty()) out += ' ';
      out += shown(name, 80) + "=" + shown(value, 200);
      if (out.size() > 2000) break;
    }
    return out;
  }

  // Keeps the entries held here from going idle (they are not taken over while this consumer lives); an entry
  // another consumer took meanwhile (this one stalled past claim_idle_s) is left to it.
  void heartbeat() {
    // The silence allowed before others call it dead: a heartbeat comes every claim_idle_s/4, or after a
    // blocking read of block_ms when there is nothing to do.
    const auto allowed_ms = std::max<std::int64_t>(static_cast<std::int64_t>(o_.claim_idle_s * 1000), o_.block_ms);
    client_.checked({"EVAL", redis_job::kHeartbeatScript, "1", alive_key_, o_.consumer, std::to_string(allowed_ms)});
    std::vector<std::string> ids;
    {
      std::lock_guard lock(mu_);
      for (const auto& h : buffered_) ids.push_back(h.id);
      for (const auto& [key, h] : in_flight_) ids.push_back(h.id);
    }
    if (ids.empty()) return;
    std::vector<std::vector<std::string>> queries;
    for (const auto& id : ids) queries.push_back({"XPENDING", o_.uri.stream, o_.group, id, id, "1"});
    const auto replies = client_.pipeline(queries);
    std::vector<std::string> claim{"XCLAIM", o_.uri.stream, o_.group, o_.consumer, "0"};
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (replies[i].is(Reply::Type::error)) continue;
      const auto p = redis::parse_xpending_entries(replies[i], client_.describe() + ": XPENDING");
      if (!p.empty() && p.front().consumer == o_.consumer) {
        claim.push_back(ids[i]);
        continue;
      }
      // Taken over (this worker stalled, or was cut off, past claim_idle_s) or acknowledged by another: theirs.
      {
        std::lock_guard lock(mu_);
        mark_lost(ids[i]);
      }
      if (warned_stolen_.insert(ids[i]).second)
        spdlog::warn("{}: entry {} was {} while held here (cut off or stalled past claim_idle_s?); it is left to them",
                     client_.describe(), ids[i],
                     p.empty() ? std::string("acknowledged by another consumer")
                               : "taken over by consumer '" + shown(p.front().consumer) + "'");
    }
    if (claim.size() == 5) return;
    claim.push_back("JUSTID");
    client_.checked(claim);
  }

  // Acknowledges the outcomes known; true when it acknowledged any.
  bool flush_outbox() {
    std::vector<Settle> batch;
    {
      std::lock_guard lock(mu_);
      batch.assign(outbox_.begin(), outbox_.end());
    }
    if (batch.empty()) return false;
    std::vector<std::vector<std::string>> commands;
    for (const Settle& s : batch) {
      if (s.dead)
        commands.push_back({"EVAL", redis_job::kDeadScript, "4", o_.uri.stream, o_.stats_key(), o_.dead, attempts_key_, o_.group,
                            s.id, o_.consumer, s.input, s.reason, std::to_string(s.deliveries), s.options,
                            s.options_rejected ? "1" : "0"});
      else
        commands.push_back({"EVAL", redis_job::kAckScript, "4", o_.uri.stream, o_.stats_key(), attempts_key_, done_key_, o_.group,
                            s.id, o_.consumer, s.skipped ? "skipped" : "done",
                            s.skipped ? std::string() : input_identity(s.input, s.options),
                            s.skipped ? std::string() : file_stamp(s.input)});
    }
    const auto replies = client_.pipeline(commands);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (replies[i].is(Reply::Type::error))
        throw RedisError(RedisError::Kind::server, client_.describe() + ": acknowledging entry " + batch[i].id + ": " +
                                                       shown(replies[i].str));
      if (replies[i].is(Reply::Type::integer) && replies[i].integer == 0)
        spdlog::info("{}: entry {} was acknowledged already (by another consumer, or before a lost reply)",
                     client_.describe(), batch[i].id);
    }
    std::lock_guard lock(mu_);
    outbox_.erase(outbox_.begin(), outbox_.begin() + static_cast<std::ptrdiff_t>(batch.size()));
    for (const Settle& s : batch) failures_.erase(s.id);
    return true;
  }

  // The stream would otherwise keep every entry ever submitted (about 80 bytes each).
  void trim() {
    const Reply r = client_.command({"EVAL", redis_job::kTrimScript, "1", o_.uri.stream});
    if (r.is(Reply::Type::error))  // not worth failing the job for: the next acknowledgement tries again
      spdlog::warn("{}: trimming acknowledged entries: {}", client_.describe(), shown(r.str));
    else if (!r.is(Reply::Type::integer))
      client_.wrong_type(r, "an integer", "EVAL (XTRIM MINID)");
  }

  std::int64_t group_pending() {
    const Reply r = client_.checked({"XPENDING", o_.uri.stream, o_.group});
    return redis::parse_xpending_summary(r, client_.describe() + ": XPENDING").count;
  }

  void remember_failure(const std::string& id, const std::string& reason) {  // mu_ held
    if (failures_.size() >= 4096) failures_.erase(failures_.begin());
    failures_[id] = reason;
  }

  bool holds(const std::string& id) const {  // mu_ held
    for (const auto& h : buffered_)
      if (h.id == id) return true;
    for (const auto& [key, h] : in_flight_)
      if (h.id == id) return true;
    for (const auto& s : outbox_)
      if (s.id == id) return true;
    return false;
  }
  std::size_t room() const {
    std::lock_guard lock(mu_);
    const std::size_t held = buffered_.size();
    return held >= static_cast<std::size_t>(o_.count) ? 0 : static_cast<std::size_t>(o_.count) - held;
  }
  bool holding() const {
    std::lock_guard lock(mu_);
    return !buffered_.empty() || !in_flight_.empty();
  }
  std::size_t outbox_size() const {
    std::lock_guard lock(mu_);
    return outbox_.size();
  }
  bool stop_requested() const {
    std::lock_guard lock(mu_);
    return stop_;
  }
  void set_trouble(std::string why) {
    {
      std::lock_guard lock(mu_);
      trouble_ = std::move(why);
    }
    answered_.notify_all();  // a stopping still_ours() does not wait for a server that is away
  }
  void sleep_for(double seconds) {
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return stop_; });
  }

  RedisSourceOptions o_;
  redis::Client client_;  // the feed thread's only
  std::string attempts_key_ = redis::job_attempts_key(o_.uri.stream, o_.group);
  std::string alive_key_ = redis::job_alive_key(o_.uri.stream, o_.group);
  std::string done_key_ = redis::job_done_key(o_.uri.stream, o_.group);
  std::set<std::string> warned_stolen_;
  mutable std::mutex mu_;
  std::condition_variable wake_, ready_;
  std::deque<Held> buffered_;                  // read, not handed out yet
  // Handed out, by input and options (InputOptions::text()): waiting for its outcome.
  std::multimap<std::pair<std::string, std::string>, Held> in_flight_;
  std::deque<Settle> outbox_;                  // outcomes to acknowledge
  std::map<std::string, std::string> failures_;  // entry id -> why its last attempt here was not committed
  std::vector<std::shared_ptr<Confirmation>> confirmations_;  // still_ours() questions not answered yet
  std::deque<std::pair<std::string, std::string>> attempt_marks_;  // entry id, run|left: to count on the server
  std::condition_variable answered_;
  std::int64_t claim_not_before_ = 0;  // the feed thread's: no XAUTOCLAIM before this (after an outage)
  std::string trouble_, failure_;
  bool stop_ = false, ended_ = false, thread_done_ = false;
  bool stopping_ = false;  // the source is stopping (stopping())
  std::atomic<bool> stop_flag_{false};  // for connect_with_backoff
  std::thread thread_;
};

}  // namespace

std::string RedisSourceOptions::stats_key() const { return redis::job_stats_key(uri.stream, group); }

bool is_redis_uri(std::string_view uri) { return uri.rfind("redis://", 0) == 0 || uri.rfind("rediss://", 0) == 0; }

RedisSourceOptions parse_redis_source_uri(const std::string& uri) {
  RedisSourceOptions o;
  o.uri = redis::parse_redis_uri(uri);
  if (!o.uri.endpoint.password.empty())
    throw std::invalid_argument("put the password in the environment (SLUICE_REDIS_PASSWORD), not in the URI");
  if (const char* password = std::getenv("SLUICE_REDIS_PASSWORD")) o.uri.endpoint.password = password;
  for (const auto& [key, value] : o.uri.query) {
    if (key == "group") o.group = value;
    else if (key == "consumer") o.consumer = value;
    else if (key == "dead") o.dead = value;
    else if (key == "count") o.count = number_option(key, value, 1, 1000);
    else if (key == "block_ms") o.block_ms = number_option(key, value, 1, 60000);
    else if (key == "claim_idle_s") o.claim_idle_s = number_option(key, value, 0.05, 86400.0);
    else if (key == "max_deliveries") o.max_deliveries = number_option(key, value, 1, 1000000);
    else if (key == "until_empty") o.until_empty = bool_option(key, value);
    else
      throw std::invalid_argument("unknown option '" + shown(key, 40) +
                                  "' (known: group, consumer, count, block_ms, claim_idle_s, max_deliveries, dead, "
                                  "until_empty)");
  }
  if (o.group.empty()) throw std::invalid_argument("a redis source needs ?group=NAME (its consumer group)");
  if (o.consumer.empty()) o.consumer = default_consumer();
  if (o.dead.empty()) o.dead = o.uri.stream + ":dead";
  if (o.dead == o.uri.stream) throw std::invalid_argument("the dead-letter stream must not be the job's stream");
  // A blocked XREADGROUP must come back before the connection's I/O timeout counts it lost.
  o.uri.endpoint.io_timeout_s = std::max(o.uri.endpoint.io_timeout_s, o.block_ms / 1000.0 + 5);
  return o;
}

std::optional<std::string> reject_input(const std::string& input, InputKind& kind) {
  if (input.empty()) return "the field 'input' is empty";
  if (input.find('\0') != std::string::npos) return "the field 'input' holds a NUL byte";
  if (input.size() > 4096) return "the field 'input' is longer than 4096 bytes";
  if (input.rfind("http://", 0) == 0 || input.rfind("https://", 0) == 0) {
    kind = InputKind::file;  // a file served over HTTP: read to its end like a local one
    return std::nullopt;
  }
  if (input.find("://") != std::string::npos)
    return "'" + shown(input, 80) + "' is a URL of a kind a job does not take (only http(s):// files and absolute paths)";
  if (input.front() != '/') return "'" + shown(input, 80) + "' is not an absolute path (each worker reads it from its own filesystem)";
  const SourceKind& source = source_kind_of(input);
  kind = source.reads_as;
  if (source.live()) return "'" + shown(input, 80) + "' is a " + source.name + ": a job input must end";
  if (source.fed() || (kind != InputKind::file && kind != InputKind::image && kind != InputKind::image_sequence))
    return "'" + shown(input, 80) + "' is not a file";
  return std::nullopt;
}

namespace {

// redis://HOST:PORT/STREAM?group=G: a job whose inputs are the stream's entries (the header above).
SourceKind redis_source_kind() {
  SourceKind k;
  k.name = "redis";
  k.claims = is_redis_uri;
  k.reach = SourceReach::network;  // the server's host must be allowed for a source-add
  k.default_name = [](const std::string& uri) {  // redis-STREAM
    const std::size_t host = uri.find("://") + 3, slash = uri.find('/', host);
    std::string stream = uri.substr(slash == std::string::npos ? uri.size() : slash + 1);
    const std::string name = sanitize_source_name(stream.substr(0, stream.find('?')));
    return name.empty() ? std::string("redis") : "redis-" + name;
  };
  k.names_job = [](const std::string&) { return true; };
  k.open_feed = [](const std::string& uri) { return open_redis_feed(parse_redis_source_uri(uri)); };
  k.check = [](const std::string& uri) {
    try {
      (void)parse_redis_source_uri(uri);
    } catch (const std::invalid_argument& e) {  // the URI may hold a password: only the reason is shown
      throw std::invalid_argument(std::string("a redis:// source: ") + e.what());
    }
  };
  k.check_note = [](const std::string& uri) {
    const RedisSourceOptions o = parse_redis_source_uri(uri);
    return "a job fed from Redis stream '" + to_valid_utf8(o.uri.stream) + "' (group '" + to_valid_utf8(o.group) +
           "'), inputs decoded as they arrive (not opened by check)";
  };
  return k;
}
SLUICE_REGISTER_SOURCE_KIND(redis_source_kind);

}  // namespace

std::shared_ptr<InputFeed> open_redis_feed(RedisSourceOptions options) {
  return std::make_shared<RedisFeed>(std::move(options));
}

}  // namespace sluice
