// sluiced: runs, checks and describes sluice pipelines.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <optional>
#include <iostream>
#include <string>
#include <vector>

#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "daemon/bench.hpp"
#include "daemon/decoder_check.hpp"
#include "daemon/log_format.hpp"
#include "daemon/model_tool.hpp"
#include "daemon/output_check.hpp"
#include "daemon/output_preflight.hpp"
#include "daemon/pipeline_overrides.hpp"
#include "daemon/progress.hpp"
#include "daemon/run_report.hpp"
#include "daemon/service.hpp"
#include "nn/graph.hpp"
#include "runtime/job_ledger.hpp"
#include "runtime/errors.hpp"
#include "runtime/gpu.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/printable.hpp"
#include "runtime/source_control.hpp"
#include "runtime/utf8.hpp"
#include "version.hpp"

namespace {

// The help: the service mode's options, then one entry per command. `sluiced COMMAND --help` prints its
// entry alone (usage line first), `sluiced --help` all of them.
constexpr const char* kServiceHelp = R"(sluiced --config FILE [SERVICE OPTIONS]
       sluiced COMMAND [ARGS]

service mode (under systemd, or by hand): run the pipeline in FILE until stopped, with a control
socket (sluicectl), SIGHUP reload (validated first; an invalid file keeps the running pipeline),
SIGTERM/SIGINT drain (sources stop, frames in flight reach the sink) and sd_notify readiness, status
and watchdog.
  --socket PATH          control socket (default /run/sluice/control.sock, mode 0660)
  --control-tcp ADDR:PORT
                         also serve the control protocol on TCP (off by default; 127.0.0.1:PORT keeps
                         it on loopback). TCP peers may only read (status, sources, version, trace)
                         unless --control-token is set; an address off loopback needs the token
  --control-token FILE   shared secret for TCP peers: a request carrying it as "token" may change
                         things. FILE: a regular file owned by sluiced's user, mode 0600 or 0400,
                         one line of >= 16 printable characters (else sluiced refuses to start)
  --metrics ADDR:PORT    serve Prometheus metrics at http://ADDR:PORT/metrics (off by default;
                         127.0.0.1:9464 keeps it on loopback)
  --console ADDR:PORT    serve the browser console at http://ADDR:PORT/ (off by default; docs/console.md):
                         read-only without the control token, like --control-tcp; off loopback it
                         needs --control-token. Source frames are kept only while someone watches
  --config-root DIR      reload may load files under DIR (repeatable); otherwise only the file
                         sluiced started with. Decided on the real path, before the file is opened
  --input-root DIR       source-add may read local paths (files, directories, globs, cameras) under
                         DIR (repeatable; real path, no '..'); without one, local paths are refused
  --allow-source-host HOST[:PORT]
                         source-add may connect to HOST (repeatable; SCHEME://HOST[:PORT] also
                         limits the scheme); without one, network URIs are refused. testsrc: always
  --output-root DIR      a reloaded pipeline's sink paths must lie under DIR (repeatable; unchecked
                         when none is set)
  These (socket, TCP, metrics, allow lists, token, roots, hosts) may also be set in FILE: control_socket,
  control_tcp, metrics, control_allow_users, control_allow_groups, control_token, config_roots,
  input_roots, output_roots, allow_source_hosts; the command line wins. docs/THREAT_MODEL.md says who
  may do what over each transport.
  --drain-timeout S      give frames in flight S seconds to drain on stop (default 30), else exit 1
  --watchdog-stall S     with WatchdogSec: stop pinging once frames are in flight and no stage has
                         moved one for S seconds (default WatchdogSec/2); an idle source with nothing
                         in flight, or a paused pipeline, is not a stall
  --client-timeout S     close each control connection S seconds after it connected (default 30),
                         however many requests it sent; a trace adds the time it records (60 s at most);
                         an admin's connection (UNIX socket, allowed to change things) has S seconds
                         from its last reply instead
  --state-dir DIR        where resumable jobs keep their ledgers (default $STATE_DIRECTORY, which
                         systemd's StateDirectory= sets)
  --allow-user NAME, --allow-group NAME
                         only these (and root, and sluiced's own user) may pause/resume/reload/stop;
                         repeatable; by default anyone who can open the socket may

)";

struct CommandHelp {
  const char* name;
  const char* text;  // "NAME ARGS" then the description, indented as in the full help; ends with '\n'
};
constexpr CommandHelp kCommandHelp[] = {
    {"run", R"(run [FILE] [--uri URI]... [--model M.onnx] [--size WxH] [--labels L] [--top-k K]
                  [--batch-size N] [--device auto|cpu|cuda] [--output PATH|-] [--resume] [--state-dir DIR]
                  [--no-progress] [--drain-timeout S]
                  run the pipeline in FILE until its sources end, then print a summary and each
                  source's outcome (frames, drops, errors, bad inputs with their reasons).
                  Without FILE: the shipped default pipeline (config/pipelines/default.yaml;
                  installed: /usr/share/sluice/config/pipelines/default.yaml), which classifies
                  frames with the shipped model. The one-liner, e.g.
                    sluiced run --uri clip.mp4 --output -
                  replaces parts of the pipeline for this run:
                  --uri: the sources of its decode stage (repeatable; a file, directory, glob,
                  image sequence, camera or URL; local paths must be readable now; a camera or
                  stream gives up after 5 failed connections in a row, 8-16 s); --model:
                  the infer stage's ONNX file, with --labels, else NAME.labels beside NAME.onnx,
                  else no labels; frames are scaled to the size its input fixes (a model that
                  leaves it open is refused: re-export it with a size); --size WxH: the
                  preprocess size (refused when it differs from the model's); --top-k:
                  classes per frame; --batch-size: frames per batch;
                  --device: where it runs (default: the file's; the default pipeline says auto:
                  the GPU when one is usable, else the CPU); --output: its sink writes one
                  JSON line per frame to PATH (- for stdout; without it the file's sink, the
                  default's: a text line per frame on stdout; a PATH that holds records of an
                  earlier run is refused unless --resume). --resume: a folder or glob of --uri
                  is a job that skips the inputs an earlier run finished (its ledger) and adds
                  to --output; without it every input is processed each time. Values are checked as the
                  file's; an error names the option. sluiced check takes the same options.
                  SIGINT/SIGTERM drains, says what was not done ("interrupted by ...") and
                  exits 130 (SIGINT) or 143 (SIGTERM), 1 when something failed; what is still
                  in flight after S seconds (default 30) is counted failed ("drain timeout")
                  and it exits 1. Exit 1 also when a source failed, an input could not be
                  read, or the sink could not write (the run stops at its first failure,
                  naming the sink, path and error). Its sinks' outputs are locked before
                  anything runs: outputs another sluiced writes stop it at once, naming that
                  one's pid (exit 1).
                  On a terminal, a progress bar per file being processed (frames done/total,
                  rate, ETA) and a line per source, on stderr; none when a sink writes records
                  to stdout and stdout is that same terminal. Directory/glob jobs keep their
                  ledger in DIR/jobs (default $STATE_DIRECTORY, else ~/.local/state/sluice): run
                  again after a crash or kill and finished files are skipped.
                  SIGINT/SIGTERM: stop the sources and drain frames in flight to the sink;
                  a second signal exits at once (exit 130).
)"},
    {"bench", R"(bench FILE [--batches N] [--warmup N] [--serial|--pipelined] [--device auto|cpu|cuda]
                  [--json PATH] [--trace PATH]
                  run FILE's source for warm-up + N batches (default 20 + 200; test patterns:
                  files and streams run to their end, measured after the warm-up), first serial
                  (one stage at a time: each stage alone, giving the bottleneck bound), then
                  pipelined; print frames/s, per-stage ms per batch, stream busy fractions, CPU
                  used, and pipelined / bound. --serial: the serial run only; --pipelined: the
                  pipelined run only (no bound). --device: run on this device instead of the
                  file's `device:` (the shipped bench files say cuda). --json: the report as JSON.
                  --trace: Chrome/Perfetto trace of the measured run, one track per stage stream.
)"},
    {"model", R"(model FILE.onnx [--batch N] [--device auto|cpu|cuda] [--precision f32|f16|bf16]
                  [--input X.npy]... [--output Y.npy]... [--bench] [--iterations N] [--warmup N]
                  [--profile] [--no-graph] [--algo-cache PATH] [--conv-modes fused|separate|gemm|depthwise]...
                  [--json PATH]
                  load an ONNX model and print the graph after sluice's passes (layers, fusions,
                  weights and activation memory); --input runs the given NumPy inputs (batch from
                  their first dimension) and --output writes the outputs as .npy; --bench times it
                  (median, min, p90, max of N runs, and back-to-back throughput on the GPU);
                  --profile: per-layer times (GPU, or wall time per layer on the CPU); --conv-modes (repeatable) limits how convolutions
                  may run (cuDNN fused epilogue, cuDNN then sluice's epilogue, 1x1 as a cuBLAS
                  product, depthwise on sluice's own kernel), for diagnosis. Default device: cuda when a GPU is usable.
)"},
    {"check", R"(check [FILE] [--uri URI]... [--model M.onnx] [...: run's pipeline options]
                  validate FILE (default: the shipped default pipeline, changed by the options
                  as `run` would) and print the resolved pipeline: stages, the stream of each,
                  queue depths, pool sizes and the memory the pools take; and per source the
                  decoder its inputs get on this host (NVDEC or the CPU, and why), opening each
                  file (of a directory: the first of each extension) up to its first frame.
                  A sink path that cannot be written here (a missing directory a file output
                  needs, a parent that is not a directory, no write permission) fails the
                  check (exit 2), naming the stage and the path; nothing is created. So does an
                  input that cannot be read (a missing file, a folder or glob with no media file).
)"},
    {"inspect", R"(inspect [KIND]  list the stage kinds, or print the parameters of one;
                  inspect pipeline: top-level keys; inspect all: everything
)"},
    {"devices", R"(devices         list the CUDA devices sluice can use
)"},
};

constexpr const char* kExitStatusHelp = R"(
exit status: 0 success; 1 frames failed, an input could not be read (missing, corrupt, truncated), or
the pipeline could not run; 2 usage or configuration error; run: 130 (SIGINT) or 143 (SIGTERM)
when a signal stopped it and nothing failed (a second signal: at once, 130).
)";

std::string full_help() {
  std::string out = std::string("usage: ") + kServiceHelp + "commands:\n";
  for (const auto& c : kCommandHelp) out += std::string("  ") + c.text;  // the first line is indented as a list
  out += "  --version       print the version\n  --help          print this help (COMMAND --help: that command's)\n";
  return out + kExitStatusHelp;
}

const CommandHelp* find_command_help(const std::string& name) {
  for (const auto& c : kCommandHelp)
    if (name == c.name) return &c;
  return nullptr;
}

// One line naming the problem and where to read on; the help itself is for --help (exit status 2).
// Arguments may be any bytes: the message is shown as valid UTF-8.
int usage_error(const std::string& raw, const std::string& command = {}) {
  const std::string msg = sluice::to_valid_utf8(raw);
  if (!command.empty() && find_command_help(command))
    std::fprintf(stderr, "sluiced: %s (sluiced %s --help shows its usage)\n", msg.c_str(), command.c_str());
  else
    std::fprintf(stderr, "sluiced: %s (sluiced --help lists the commands)\n", msg.c_str());
  return 2;
}


int cmd_inspect(const std::vector<std::string>& args) {
  const auto& reg = sluice::StageRegistry::builtin();
  if (args.empty()) {
    std::printf("stage kinds (sluiced inspect KIND for parameters; sluiced inspect pipeline for top-level keys):\n");
    for (const auto& info : reg.all()) std::printf("  %-12s %s\n", info.kind.c_str(), info.doc.c_str());
    return 0;
  }
  if (args[0] == "pipeline") {
    std::printf("%s", sluice::describe_pipeline_keys().c_str());
    return 0;
  }
  if (args[0] == "all") {  // the reference docs/stages.md embeds (kept in sync by a test)
    std::printf("%s", sluice::describe_pipeline_keys().c_str());
    for (const auto& info : reg.all()) std::printf("\n%s", sluice::describe_stage(info).c_str());
    return 0;
  }
  const sluice::StageInfo* info = reg.find(args[0]);
  if (!info) return usage_error("unknown stage kind '" + args[0] + "' (known: " + reg.kinds() + ")", "inspect");
  std::printf("%s", sluice::describe_stage(*info).c_str());
  return 0;
}

int cmd_devices() {
  const int n = sluice::gpu::device_count();
  if (!sluice::gpu::built_with_cuda()) std::printf("built without CUDA: pipelines run on the CPU\n");
  else if (n == 0) std::printf("no CUDA device visible: pipelines with device: auto run on the CPU\n");
  for (int i = 0; i < n; ++i) std::printf("gpu %d: %s\n", i, sluice::gpu::device_name(i).c_str());
  return 0;
}

int cmd_check(const std::string& file, const sluice::PipelineOverrides& overrides) {
  auto spec = sluice::load_pipeline(file);
  const sluice::AppliedOverrides applied(spec, overrides);
  const auto plan = applied.plan(spec);
  // An output that cannot be written would fail every frame of the run at the sink: a configuration error here.
  if (const auto problems = sluice::output_problems(spec); !problems.empty()) {
    for (const auto& p : problems) std::fprintf(stderr, "sluiced: %s\n", p.c_str());
    return 2;
  }
  // An input that cannot be read (a missing file, a folder that is not there) would fail in the run: so does the
  // check. A file of a job that cannot be read is reported, not counted: the job goes on without it.
  const sluice::DecoderReport decoders = sluice::describe_decoders(spec, plan);
  if (decoders.unreadable.empty()) std::printf("%s: ok\n", file.c_str());
  else std::printf("%s: %zu input(s) cannot be read (below)\n", file.c_str(), decoders.unreadable.size());
  std::printf("%s%s", sluice::describe_plan(plan).c_str(), decoders.text.c_str());
  for (const auto& u : decoders.unreadable)
    std::fprintf(stderr, "sluiced: %s: input %s\n", file.c_str(), sluice::printable(u).c_str());
  return decoders.unreadable.empty() ? 0 : 2;
}

// The default state directory of `sluiced run` outside systemd: $XDG_STATE_HOME/sluice or ~/.local/state/sluice.
std::string user_state_dir() {
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) return std::string(xdg) + "/sluice";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.local/state/sluice";
  return {};
}

std::vector<sluice::SourceReport> source_reports(const sluice::Pipeline& pipeline) {
  if (auto* control = pipeline.source_control()) return control->sources();
  return {};
}

// Whether a sink of `spec` writes its records to stdout (type stdout, or jsonl per run with path -).
bool writes_to_stdout(const sluice::PipelineSpec& spec) {
  for (const auto& stage : spec.stages) {
    if (stage.kind != "sink") continue;
    const auto& p = stage.params.all();
    const auto param = [&](const char* key) { return p.count(key) ? stage.params.string(key) : std::string(); };
    const std::string type = param("type");
    if (type == "stdout" || (type == "jsonl" && param("per") == "run" && param("path") == "-")) return true;
  }
  return false;
}

int cmd_run(const std::string& file, const sluice::PipelineOverrides& overrides, std::string state_dir, bool progress,
            double drain_timeout_s) {
  // Signals are taken synchronously by this thread; every stage thread inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto spec = sluice::load_pipeline(file);
  const sluice::AppliedOverrides applied(spec, overrides);
  if (!state_dir.empty()) spec.state_dir = state_dir;
  if (spec.state_dir.empty()) spec.state_dir = user_state_dir();
  // Outputs locked before anything is built: a run over outputs another sluiced writes fails at once naming its
  // pid (exit 1) instead of failing every frame at its sink. (One that cannot be written fails its frames there.)
  sluice::ReadyOutputs outputs;
  try {
    outputs = sluice::lock_outputs(spec);
  } catch (const sluice::OutputInUse& e) {
    throw std::runtime_error(std::string(e.what()) + "; not starting");
  }
  sluice::Pipeline pipeline(applied.plan(spec));
  spdlog::info("pipeline '{}' starting: {} stages on {} ({})", spec.name, spec.stages.size(),
               sluice::to_string(pipeline.plan().device), sluice::to_string(pipeline.plan().execution));
  pipeline.start();
  std::optional<sluice::ProgressDisplay> display;
  // Redraws move the cursor up over the block: on the terminal that also shows the records, they would
  // overwrite result lines. Then no progress (the summary still comes at the end).
  const bool records_on_this_terminal = writes_to_stdout(spec) && sluice::ProgressDisplay::same_terminal(stdout, stderr);
  if (progress && !records_on_this_terminal && sluice::ProgressDisplay::wanted(stderr)) display.emplace(stderr);
  int interrupts = 0, stopped_by = 0;  // stopped_by: the first SIGINT/SIGTERM (the run then exits 128 + it)
  std::string sink_failed;             // why a sink failed frames: the run stops, it could deliver no more
  std::int64_t next_draw = 0, drain_deadline = 0;
  while (!pipeline.finished()) {
    if (sink_failed.empty() && interrupts == 0) {
      sink_failed = pipeline.sink_failure();
      if (!sink_failed.empty()) {
        if (display) display->clear();
        spdlog::error("stopping the run: the sink cannot write (above); frames not written are counted failed");
        pipeline.request_stop();
      }
    }
    if (interrupts > 0 && sluice::now_ns() > drain_deadline) {
      // A stage or source stuck in a blocking call: what is in flight is counted failed, not waited for.
      const std::uint64_t failed = pipeline.abandon("drain timeout: the pipeline did not drain within " +
                                                    fmt::format("{:g}", drain_timeout_s) + " s of the stop");
      if (display) display->clear();
      spdlog::error("the pipeline did not drain within {:g} s; {} frames in flight counted failed; exiting",
                    drain_timeout_s, failed);
      std::fflush(stdout);
      std::fprintf(stderr, "%s", sluice::format_summary(pipeline.snapshot()).c_str());
      std::fflush(nullptr);
      std::_Exit(1);  // the stuck threads still run: nothing may wait for them
    }
    if (display && sluice::now_ns() >= next_draw) {
      const auto frames = pipeline.ledger().totals();
      display->update(sluice::render_progress(pipeline.inputs().snapshot(), source_reports(pipeline),
                                              sluice::now_ns(), sluice::ProgressDisplay::columns(stderr) - 1, &frames));
      next_draw = sluice::now_ns() + 250'000'000;
    }
    timespec slice{0, 100'000'000};
    const int sig = sigtimedwait(&signals, nullptr, &slice);
    if (sig <= 0) continue;
    if (display) display->clear();  // the message goes above the progress block, not under it
    if (++interrupts == 1) {
      stopped_by = sig;
      spdlog::info("{}: stopping sources and draining (again to exit at once)", strsignal(sig));
      pipeline.request_stop();
      drain_deadline = sluice::now_ns() + static_cast<std::int64_t>(drain_timeout_s * 1e9);
    } else {
      spdlog::warn("{} again: exiting without draining", strsignal(sig));
      std::fflush(stdout);
      std::_Exit(130);
    }
  }
  pipeline.wait();
  if (display) {
    const auto frames = pipeline.ledger().totals();
    display->update(sluice::render_progress(pipeline.inputs().snapshot(), source_reports(pipeline), sluice::now_ns(),
                                            sluice::ProgressDisplay::columns(stderr) - 1, &frames));
    display->finish();
  }
  const auto snap = pipeline.snapshot();
  std::fflush(stdout);
  std::fprintf(stderr, "%s", sluice::format_summary(snap).c_str());
  if (auto reports = source_reports(pipeline); !reports.empty())
    std::fprintf(stderr, "%s", sluice::render_progress({}, reports, sluice::now_ns(), 1000, &snap.frames).c_str());
  if (stopped_by != 0) {
    std::fprintf(stderr, "%s", sluice::describe_interruption(strsignal(stopped_by), snap.frames, source_reports(pipeline),
                                                             pipeline.inputs().snapshot(64))
                                   .c_str());
  }
  const auto& f = snap.frames;
  if (f.in_flight() != 0) {
    spdlog::critical("frame conservation violated: {} frames unaccounted for", f.in_flight());
    return 1;
  }
  const auto inputs = pipeline.inputs().totals();
  // A shared job (Redis) takes back the inputs it could not finish here and does them again (here or on another
  // worker): their failed frames and errors were not their final outcome. What is left is this run's own.
  const std::uint64_t inputs_with_errors = inputs.with_errors - std::min(inputs.with_errors, inputs.handed_back_with_errors);
  const std::uint64_t frames_failed = f.failed - std::min(f.failed, inputs.handed_back_failed_frames);
  if (inputs.handed_back > 0)
    spdlog::info("{} input(s) went back to the job to be done again ({} frames failed in those attempts)",
                 inputs.handed_back, inputs.handed_back_failed_frames);
  // Blame what failed: an input that could not be read, or the sink that could not write what was read.
  if (inputs.unreadable > 0)
    spdlog::error("{} of {} inputs could not be read completely (see the sources above)", inputs.unreadable, inputs.inputs);
  if (!sink_failed.empty() && frames_failed > 0)
    spdlog::error("{} frames failed, not delivered: the sink could not write them ({}); its output holds the {} delivered",
                  frames_failed, sink_failed, f.delivered);
  // A resumed job skips the inputs that failed before: say them again, so the job does not look clean.
  std::size_t failed_before = 0;
  if (const auto& job = pipeline.plan().shared->job) {
    const auto failed = job->failed_inputs();
    for (const auto& i : failed)
      std::fprintf(stderr, "failed input: %s: %s\n", sluice::printable(sluice::shown_uri(i.input)).c_str(),
                   sluice::printable(i.reason).c_str());
    if (!failed.empty())
      spdlog::error("{} inputs of this job are recorded as failed in {} (fix or replace them to redo them)",
                    failed.size(), job->path().string());
    failed_before = failed.size();
  }
  // A stage that could not open (an output or job locked by another sluiced) fails the run even without frames.
  // Errors that failed frames or an input's outputs are judged by those frames and inputs (above).
  std::uint64_t stage_errors = 0;
  for (const auto& st : snap.stages) stage_errors += st.errors;
  stage_errors -= std::min(stage_errors, pipeline.errors_of_frames());
  // A source that failed as a whole (a stream that gave up, a FIFO refused, a path that is not there) may
  // have no input record at all: it counts like an input that could not be read.
  std::size_t sources_failed = 0;
  for (const auto& r : source_reports(pipeline)) sources_failed += r.state == sluice::SourceState::failed ? 1 : 0;
  if (sources_failed > 0) spdlog::error("{} source(s) failed (see the sources above)", sources_failed);
  // A failure (frames, inputs, sources) is exit 1 whether or not a signal stopped the run; a run a signal stopped
  // without one did not do all it was asked to: 128 + the signal (130 for SIGINT), as a shell reports it.
  const bool clean = frames_failed == 0 && inputs_with_errors == 0 && failed_before == 0 && stage_errors == 0 &&
                     sources_failed == 0;
  if (!clean) return 1;
  return stopped_by != 0 ? 128 + stopped_by : 0;
}

// Walks the options of one command: the current option, its value, and checked numbers.
class OptionReader {
 public:
  explicit OptionReader(const std::vector<std::string>& args) : args_(args) {}
  bool next() { return ++i_ < args_.size(); }
  const std::string& option() const { return args_[i_]; }
  const std::string& value() {
    if (i_ + 1 >= args_.size()) throw std::invalid_argument(option() + " needs a value");
    return args_[++i_];
  }
  const std::string& choice(std::initializer_list<const char*> allowed) {
    const std::string& name = option();
    const std::string& v = value();
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return v;
      list += (list.empty() ? "" : "|") + std::string(a);
    }
    throw std::invalid_argument(name + " needs one of " + list + ", got '" + v + "'");
  }
  int integer(int min) {
    const std::string& name = option();
    const std::string& v = value();
    std::size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || n < min)
      throw std::invalid_argument(name + " needs an integer >= " + std::to_string(min) + ", got '" + v + "'");
    return n;
  }
  double seconds() {
    const std::string& name = option();
    const std::string& v = value();
    std::size_t used = 0;
    double d = -1;
    try {
      d = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || !(d > 0)) throw std::invalid_argument(name + " needs a number of seconds > 0, got '" + v + "'");
    return d;
  }

 private:
  const std::vector<std::string>& args_;
  std::size_t i_ = static_cast<std::size_t>(-1);
};

int cmd_bench(const std::vector<std::string>& args) {
  sluice::BenchOptions o;
  for (OptionReader r(args); r.next();) {
    const std::string& a = r.option();
    if (a == "--batches") o.batches = r.integer(1);
    else if (a == "--warmup") o.warmup = r.integer(0);
    else if (a == "--serial") o.serial_only = true;
    else if (a == "--pipelined") o.pipelined_only = true;
    else if (a == "--json") o.json_path = r.value();
    else if (a == "--trace") o.trace_path = r.value();
    else if (a == "--device") o.device = r.choice({"auto", "cpu", "cuda"});
    else if (!a.empty() && a[0] == '-') throw std::invalid_argument("unknown option '" + a + "'");
    else if (o.file.empty()) o.file = a;
    else throw std::invalid_argument("bench takes one pipeline FILE");
  }
  if (o.file.empty()) throw std::invalid_argument("bench needs a pipeline FILE");
  return sluice::run_bench(o);
}

int cmd_model(const std::vector<std::string>& args) {
  sluice::ModelToolOptions o;
  for (OptionReader r(args); r.next();) {
    const std::string& a = r.option();
    if (a == "--batch") o.batch = r.integer(1);
    else if (a == "--device") o.device = r.choice({"auto", "cpu", "cuda"});
    else if (a == "--precision") o.precision = r.choice({"f32", "f16", "bf16"});
    else if (a == "--input") o.inputs.push_back(r.value());
    else if (a == "--output") o.outputs.push_back(r.value());
    else if (a == "--bench") o.bench = true;
    else if (a == "--profile") o.profile = true;
    else if (a == "--no-graph") o.cuda_graph = false;
    else if (a == "--iterations") o.iterations = r.integer(1);
    else if (a == "--warmup") o.warmup = r.integer(0);
    else if (a == "--algo-cache") o.algo_cache = r.value();
    else if (a == "--conv-modes") o.conv_modes.push_back(r.choice({"fused", "separate", "gemm", "depthwise"}));
    else if (a == "--json") o.json_path = r.value();
    else if (!a.empty() && a[0] == '-') throw std::invalid_argument("unknown option '" + a + "'");
    else if (o.file.empty()) o.file = a;
    else throw std::invalid_argument("model takes one FILE.onnx");
  }
  if (o.file.empty()) throw std::invalid_argument("model needs a FILE.onnx");
  return sluice::run_model_tool(o);
}

// run's and check's arguments: an optional pipeline FILE and the one-liner's options (daemon/pipeline_overrides.hpp).
struct PipelineArgs {
  std::string file;  // empty: the shipped default pipeline
  sluice::PipelineOverrides overrides;
  // Takes the current argument of `r` if it is FILE or a pipeline option; false otherwise.
  bool take(OptionReader& r, const std::string& command) {
    const std::string& a = r.option();
    if (a == "--device") return overrides.take(a, r.choice({"auto", "cpu", "cuda"}));
    if (a == "--resume") return overrides.resume = true;
    if (sluice::PipelineOverrides::is_option(a)) return overrides.take(a, r.value());
    if (!a.empty() && a[0] == '-') return false;
    if (!file.empty()) throw std::invalid_argument(command + " takes one pipeline FILE (got '" + file + "' and '" + a + "')");
    file = a;
    return true;
  }
  std::string path() const { return file.empty() ? sluice::shipped_default_pipeline() : file; }
};

int cmd_check_args(const std::vector<std::string>& args) {
  PipelineArgs pipeline;
  for (OptionReader r(args); r.next();)
    if (!pipeline.take(r, "check")) throw std::invalid_argument("unknown option '" + r.option() + "'");
  return cmd_check(pipeline.path(), pipeline.overrides);
}

int cmd_run_args(const std::vector<std::string>& args) {
  PipelineArgs pipeline;
  std::string state_dir;
  bool progress = true;
  double drain_timeout_s = 30;
  for (OptionReader r(args); r.next();) {
    const std::string& a = r.option();
    if (a == "--state-dir") state_dir = r.value();
    else if (a == "--drain-timeout") drain_timeout_s = r.seconds();
    else if (a == "--no-progress") progress = false;
    else if (!pipeline.take(r, "run")) throw std::invalid_argument("unknown option '" + a + "'");
  }
  return cmd_run(pipeline.path(), pipeline.overrides, state_dir, progress, drain_timeout_s);
}

int cmd_service(const std::vector<std::string>& args) {
  sluice::ServiceOptions o;
  for (OptionReader r(args); r.next();) {
    const std::string& a = r.option();
    if (a == "--config") o.config = r.value();
    else if (a == "--socket") o.socket = r.value();
    else if (a == "--metrics") o.metrics = r.value();
    else if (a == "--console") o.console = r.value();
    else if (a == "--control-tcp") o.control_tcp = r.value();
    else if (a == "--drain-timeout") o.drain_timeout_s = r.seconds();
    else if (a == "--watchdog-stall") o.watchdog_stall_s = r.seconds();
    else if (a == "--client-timeout") o.client_timeout_s = r.seconds();
    else if (a == "--state-dir") o.state_dir = r.value();
    else if (a == "--allow-user") o.allow_users.push_back(r.value());
    else if (a == "--allow-group") o.allow_groups.push_back(r.value());
    else if (a == "--control-token") o.control_token = r.value();
    else if (a == "--config-root") o.config_roots.push_back(r.value());
    else if (a == "--input-root") o.input_roots.push_back(r.value());
    else if (a == "--output-root") o.output_roots.push_back(r.value());
    else if (a == "--allow-source-host") o.allow_source_hosts.push_back(r.value());
    else throw std::invalid_argument("unknown service option '" + a + "'");
  }
  if (o.config.empty()) throw std::invalid_argument("--config FILE is required");
  return sluice::run_service(o);
}

}  // namespace

int main(int argc, char** argv) {
  sluice::setup_logging();
  std::vector<std::string> args(argv + 1, argv + argc);
  const auto is_help = [](const std::string& a) { return a == "--help" || a == "-h"; };
  if (args.empty()) {  // the two forms and the commands; the options are for --help
    std::string names;
    for (const auto& c : kCommandHelp) names += std::string(names.empty() ? "" : ", ") + c.name;
    std::fprintf(stderr, "usage: sluiced --config FILE [SERVICE OPTIONS]\n       sluiced COMMAND [ARGS]    (%s)\n"
                 "sluiced --help lists the options and commands; sluiced COMMAND --help shows one\n", names.c_str());
    return 2;
  }
  if (is_help(args[0]) || args[0] == "help") {
    if (args[0] == "help" && args.size() > 1) {
      const CommandHelp* help = find_command_help(args[1]);
      if (!help) return usage_error("unknown command '" + args[1] + "'");
      std::printf("usage: sluiced %s%s", help->text, kExitStatusHelp);
      return 0;
    }
    std::printf("%s", full_help().c_str());
    return 0;
  }
  const std::string cmd = args[0];
  // COMMAND --help (anywhere among its arguments) prints that command's help; the service mode's is the full one.
  if (std::any_of(args.begin() + 1, args.end(), is_help)) {
    if (const CommandHelp* help = find_command_help(cmd)) {
      std::printf("usage: sluiced %s%s", help->text, kExitStatusHelp);
      return 0;
    }
    if (cmd.rfind("--", 0) == 0) {
      std::printf("%s", full_help().c_str());
      return 0;
    }
  }
  try {
    if (cmd.rfind("--", 0) == 0 && cmd != "--version") return cmd_service(args);
    args.erase(args.begin());
    if (cmd == "--version") {
      std::printf("sluiced %s (%s)\n", SLUICE_VERSION, sluice::gpu::built_with_cuda() ? "CUDA" : "CPU only");
      return 0;
    }
    if (cmd == "inspect") return cmd_inspect(args);
    if (cmd == "devices") return cmd_devices();
    if (cmd == "check") return cmd_check_args(args);
    if (cmd == "run") return cmd_run_args(args);
    if (cmd == "bench") return cmd_bench(args);
    if (cmd == "model") return cmd_model(args);
    return usage_error("unknown command '" + cmd + "'");
  } catch (const std::invalid_argument& e) {
    return usage_error(e.what(), cmd);
  } catch (const sluice::ConfigError& e) {  // paths in messages may be any bytes: shown as valid UTF-8
    std::fprintf(stderr, "sluiced: %s\n", sluice::to_valid_utf8(e.what()).c_str());
    return 2;
  } catch (const sluice::nn::ModelError& e) {
    std::fprintf(stderr, "sluiced: %s\n", sluice::to_valid_utf8(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluiced: %s\n", sluice::to_valid_utf8(e.what()).c_str());
    return 1;
  }
}
