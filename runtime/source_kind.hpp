#pragma once
// Source kinds: what a decode stage's `uri` names and how the source set reads it, in one table. Each kind
// registers itself next to its code (SLUICE_REGISTER_SOURCE_KIND):
//   file, image, image-sequence, camera, stream   runtime/media_source_kinds.cpp (readers: media/)
//   testsrc                                        stages/testsrc_reader.cpp
//   redis                                          runtime/redis_source.cpp (a job fed from a Redis stream)
// A kind says, by the URI's shape only (no I/O): whether a URI is its own, which reader family opens its inputs
// (ReaderRegistry, per InputKind), whether it is live, what the control socket's access policy checks, the
// source's default name, how the URI expands into inputs (a directory or glob: a job) or feeds them while it
// runs, what is checked when the pipeline file is loaded, and what `sluiced check` says instead of opening it.
// Nothing outside a kind's own file tests its scheme: a new kind is its own files plus one registration.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/frame_reader.hpp"
#include "runtime/inputs.hpp"

namespace sluice {

class InputFeed;

// What the control socket's access policy checks before a source-add of this kind (daemon/access_policy.hpp).
enum class SourceReach : std::uint8_t {
  anywhere,    // nothing outside the process is read (test patterns)
  network,     // a remote endpoint: its host must be allowed (--allow-source-host)
  local_path,  // a local path (local_path()): it must lie under an --input-root
};

struct SourceKind {
  std::string name;  // "file", "stream", "redis", ...: logs, status, check
  // Kinds are asked in order of precedence (lower first); the first that claims a URI has it. Scheme kinds
  // claim by their prefix (precedence 0), shapes of local paths after them; `file` claims whatever is left.
  int precedence = 0;
  std::function<bool(std::string_view uri)> claims;
  InputKind reads_as = InputKind::file;  // the reader family of its inputs (live: camera, stream)
  SourceReach reach = SourceReach::local_path;
  // Names local files (a file, a directory or a glob of them): the daemon checks they can be read before it
  // accepts them (source-add, --uri).
  bool local_files = false;
  // Test patterns: ends on its own only with a frame count (such a source carries over a reload like a live
  // one when it has none).
  bool endless_without_frame_count = false;

  // local_path: the path the access policy checks (v4l2:0 -> /dev/video0); default: the URI itself.
  std::function<std::string(const std::string& uri)> local_path;
  // A short stable name, only [A-Za-z0-9._-] (sanitize_source_name); empty falls back to "source".
  std::function<std::string(const std::string& uri)> default_name;
  // The inputs the URI stands for (may touch the filesystem; on the source's thread); default: the URI itself,
  // one input of reads_as. Throws InputError (a directory without media files, a glob that matches nothing).
  std::function<ExpandedSource(const std::string& uri)> expand;
  // True when the URI names a batch job (a ledger is kept with `resume`): a directory, a glob, a fed stream.
  std::function<bool(const std::string& uri)> names_job;
  // Set for a job fed while it runs: opens the feed its inputs come from (runtime/input_feed.hpp).
  std::function<std::shared_ptr<InputFeed>(const std::string& uri)> open_feed;
  // Checked when the pipeline file is loaded and at source-add: throws std::invalid_argument saying what is
  // wrong (never echoing secrets).
  std::function<void(const std::string& uri)> check;
  // What `sluiced check` says of the URI instead of opening it (live sources, fed jobs); unset: check opens it.
  std::function<std::string(const std::string& uri)> check_note;

  bool live() const noexcept { return is_live(reads_as); }
  // expand(uri), or the URI as its one input.
  ExpandedSource inputs_of(const std::string& uri) const;
  bool fed() const noexcept { return static_cast<bool>(open_feed); }
};

// The kind of `uri` (the `file` kind when no other claims it).
const SourceKind& source_kind_of(std::string_view uri);
// Every registered kind, in order of precedence.
const std::vector<SourceKind>& source_kinds();

// The reader family of the URI's kind (source_kind_of(uri).reads_as).
InputKind classify_uri(std::string_view uri);
// The inputs the URI stands for (source_kind_of(uri).inputs_of(uri)); throws InputError as expand does.
ExpandedSource expand_source(const std::string& uri);

// The source's default name by its kind (never empty: "source" when nothing else is left).
std::string default_source_name(const std::string& uri);
// Whether a source with these settings goes on across a reload: live ones, and endless test patterns.
bool carries_over_reload(const std::string& uri, const ReaderOptions& reader);

// Used by SLUICE_REGISTER_SOURCE_KIND.
struct SourceKindRegistrar {
  explicit SourceKindRegistrar(SourceKind (*declare)());
};

}  // namespace sluice

// After the function that declares the kind:
//   SLUICE_REGISTER_SOURCE_KIND(redis_source_kind);
// Registrations are collected while static objects are made and ordered on the first source_kind_of(); two
// kinds of one name throw std::logic_error there. Nothing else names such a file, so CMakeLists.txt links the
// libraries holding them whole.
#define SLUICE_REGISTER_SOURCE_KIND(declare) \
  static const ::sluice::SourceKindRegistrar sluice_source_kind_registrar_##declare { declare }
