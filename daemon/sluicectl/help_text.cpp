#include "daemon/sluicectl/help_text.hpp"

#include "daemon/protocol.hpp"

namespace sluice::ctl {

const char* const kUsageHead = R"(usage: sluicectl [--socket PATH | --tcp HOST:PORT [--token-file FILE]] [--timeout SECONDS] COMMAND [ARGS]

Talks to a running sluiced over its control socket (or its TCP listener).

commands:
)";

std::string usage_tail() {
  const std::string read_only = request_list(/*read_only=*/true);  // what a TCP peer without the token may send
  return std::string(R"(options:
  --socket PATH         control socket (default: $SLUICE_SOCKET if set, else /run/sluice/control.sock)
  --tcp HOST:PORT       talk to sluiced's --control-tcp listener instead (default: $SLUICE_CONTROL_TCP);
)") +
         "                        without a token only " + read_only + " are served there\n" +
         R"(  --token-file FILE     send the shared secret in FILE (sluiced's --control-token; mode 0600) with
                        each request, so TCP requests may change things (default: $SLUICE_TOKEN_FILE)
  --timeout SECONDS     deadline for connecting, sending and the reply (default 5; trace waits
                        its SECONDS on top)
  --version             print this client's version (without asking the daemon)
  -h, --help            print this help

exit status:
  0  success
  1  the daemon refused the request (ok:false); its error is printed on stderr
  2  usage error
  3  cannot connect to the socket (not there, permission denied, nothing listening)
  4  no reply before the deadline, or a reply that is not valid protocol JSON
  5  trace: the output FILE cannot be written
)";
}

const char* const kStatusHelp = R"(usage: sluicectl status [--json]

Print the daemon's state, uptime, config file, pipeline and device, then one row per stage:
  frames          frames the stage has handled
  fps 1s/10s/60s  frames per second over the last 1, 10 and 60 seconds
  host ms/b       host time per batch (wall time, waits included)
  cpu ms/b        CPU time per batch: the stage's thread and its workers (below host ms: it waits)
  gpu ms/b        GPU time per batch (GPU stages only)
  busy            fraction of time the stage's stream was busy (GPU stages only)
  queue           input queue depth / capacity
  drops, errors   frames the stage dropped or failed
followed by the frame ledger (produced = delivered + dropped + failed + in flight), drop reasons and
errors, and capture-to-sink latency percentiles. Between the stages and the ledger: one row per source
(as sluicectl sources shows them, without URIs and bad inputs) and, while there are inputs, their
progress (a job's inputs done/total, and frames done/total, fps and ETA of each input being decoded).
Fields the daemon did not send are shown as '-'.

  --json          print the daemon's reply as indented JSON instead
)";

const char* const kWatchHelp = R"(usage: sluicectl watch [--interval SECONDS]

Clear the screen and print status every SECONDS (default 1, at least 0.1; -n S is short for
--interval S) until Ctrl-C (exit 0).
Connection errors are shown in place and retried, so a daemon restart can be watched through.
Each line is cut to the terminal's width with an ellipsis, so a long reason cannot wrap and break
the tables (not on a terminal: to $COLUMNS when set, else whole lines).
)";

const char* const kSourcesHelp = R"(usage: sluicectl sources [--json]

List the pipeline's run-time sources, one row per source:
  id, source      its id and name (either one names it for remove-source)
  kind            file, image, image-sequence, camera, stream or testsrc (a directory or glob: file)
  state           connecting, live, stalled, backoff, eos, failed or removed (paused while the daemon is)
  frames, fps     frames decoded and handed on, and decoded frames per second lately
  dropped         frames dropped before batching (a leaky source behind the pipeline, or --rate-limit)
  errors          open and read errors, bad files
  reconnects      times a camera or stream connected again
then why a source is stalled, backing off or failed (and when it tries again), and for a job (a directory
or glob) its inputs done/total and failed; below each row its URI and its bad inputs. Then one row per
input being decoded: frames done/total (done = delivered + dropped + failed), %, fps and ETA, followed by
the recently finished inputs with their error. Fields the daemon did not send are shown as '-'.
A pipeline whose decode stage renders its test pattern directly has no run-time sources.

  --json          print the daemon's reply as indented JSON instead
)";

const char* const kAddSourceHelp = R"(usage: sluicectl add-source URI [--name NAME] [--leaky|--no-leaky] [--rate-limit FPS] [--loop]
                            [--latency-budget-ms MS]

Ask the daemon to start a source in the running pipeline; the other sources keep running. URI is
  clip.mp4                 a video file
  clips/, 'clips/*.mp4'    a directory or glob (quote it): a job over the files it holds
  photo.jpg                an image
  frames/img_%04d.png      an image sequence
  /dev/video0, v4l2:0      a camera
  rtsp://HOST/PATH         a stream (also rtmp://, http(s)://, tcp://, udp://, srt://)
  testsrc:PATTERN          a test pattern (bars, shapes, gradient, checkerboard, noise)
A local path is made absolute (against this shell's working directory) before it is sent, and the
daemon must be able to read it at that path. Prints the new source's id and name. The daemon answers
before anything is opened: a file it cannot decode or a camera that does not answer shows up in
sluicectl sources (state, reason, errors). It refuses (exit 1, its reason on stderr) a file or image
that is missing or that it may not read, a --name in use, and any source when the pipeline's decode
stage has no run-time sources. May be restricted by sluiced's --allow-user /
--allow-group.

  --name NAME        the source's name (default: from URI, e.g. clip for clip.mp4, video0 for a camera)
  --leaky            when the pipeline is behind, drop the oldest frame (default for live sources)
  --no-leaky         when the pipeline is behind, wait for it (default for files)
  --rate-limit FPS   at most FPS frames per second (0: unlimited, the default); live sources drop the rest
  --loop             files: start again at the end
  --latency-budget-ms MS  this source's capture-to-sink budget (0: none), instead of the pipeline's
                     latency_budget_ms: batches leave early enough for it; frames past it are counted late
Use -- before a URI that starts with '-'.
The daemon accepts local paths only under its --input-root directories and network URIs only to its
--allow-source-host hosts (testsrc: always); anything else is refused with the option to set.
)";

const char* const kRemoveSourceHelp = R"(usage: sluicectl remove-source ID|NAME

Ask the daemon to stop a source, named by its id or its name (sluicectl sources lists both). Frames it
already decoded still reach the sink. Prints "removed source ID|NAME" as given. May be restricted by
sluiced's --allow-user / --allow-group.
)";

const char* const kPauseHelp = R"(usage: sluicectl pause

Ask the daemon to pause: sources stop producing; frames already in flight still reach the sink.
Replies once the sources have handed on the batch they were making. Prints the new state. May be restricted by sluiced's --allow-user / --allow-group.
)";

const char* const kResumeHelp = R"(usage: sluicectl resume

Ask a paused daemon to produce again. Prints the new state.
)";

const char* const kReloadHelp = R"(usage: sluicectl reload [FILE]

Ask the daemon to validate FILE and switch to it; without FILE, the daemon re-reads its current config
file. FILE is made absolute (against this shell's working directory) before it is sent, and the daemon
must be able to read it at that path. The daemon loads only the file it was started with or files under
its --config-root directories. If validation fails the old pipeline keeps running and the daemon's error
is printed (exit 1): the place (path:line:col) and the problem, with words quoted from the file left out
(they are in the daemon's log).
)";

const char* const kStopHelp = R"(usage: sluicectl stop

Ask the daemon to stop: sources stop, frames in flight drain to the sink, then it exits.
)";

const char* const kTraceHelp = R"(usage: sluicectl trace SECONDS -o FILE

Ask the daemon to record a trace of the running pipeline for SECONDS (a number, more than 0 and at most
60), then write it to FILE as Chrome/Perfetto trace JSON ({"traceEvents": [...], ...}); open it in
https://ui.perfetto.dev or chrome://tracing. The daemon answers only after recording, so the reply
deadline is SECONDS plus --timeout. FILE is replaced atomically (written to a temporary file in the same
directory, then renamed); an existing FILE is left alone if anything fails. A summary goes to stderr.
The daemon records one trace at a time: while another client's trace records, this one is refused at
once (exit 1, saying how long the other has left), unless this client outranks it (the UNIX socket's
admins over TCP peers), which ends the other client's trace early with an error.

  -o, --output FILE   where to write the trace (required); '-' writes it to stdout
)";

const char* const kVersionHelp = R"(usage: sluicectl version

Print this client's version and the daemon's (and whether the daemon was built with CUDA).
)";

const char* const kHelpHelp = R"(usage: sluicectl help [COMMAND]
)";

}  // namespace sluice::ctl
