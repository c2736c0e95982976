#include "runtime/inputs.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

namespace sluice {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool has_extension_in(std::string_view path, const std::vector<std::string_view>& list) {
  const std::string ext = extension_of(path);
  return !ext.empty() && std::find(list.begin(), list.end(), ext) != list.end();
}

// Where a printf integer conversion (%d, %4d, %04d) starts in `s`, and its length; npos when none.
std::pair<std::size_t, std::size_t> find_printf_int(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') continue;
    std::size_t j = i + 1;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j < s.size() && s[j] == 'd') return {i, j + 1 - i};
  }
  return {std::string_view::npos, 0};
}

// The kind of a file found in a directory or by a glob: by extension only (its name is not a pattern).
InputKind kind_of_found_file(const std::string& path) {
  return has_extension_in(path, image_extensions()) ? InputKind::image : InputKind::file;
}

std::string join_extensions() {
  std::string s;
  for (const auto* list : {&video_extensions(), &image_extensions()})
    for (std::string_view e : *list) {
      if (!s.empty()) s += ' ';
      s += e;
    }
  return s;
}

ExpandedSource expand_directory(const std::string& uri) {
  ExpandedSource out;
  out.job = true;
  std::error_code ec;
  fs::directory_iterator it(uri, ec);
  if (ec) throw InputError("cannot read directory '" + uri + "': " + ec.message());
  std::size_t others = 0;
  for (const fs::directory_iterator end; it != end; it.increment(ec)) {
    if (ec) throw InputError("cannot read directory '" + uri + "': " + ec.message());
    const fs::path& path = it->path();
    const std::string name = path.filename().string();
    std::error_code type_ec;
    // Hidden files (.complete markers, macOS ._clip.mp4 companions) and subdirectories are not inputs. Other
    // entries that are not regular files (a FIFO, socket or device named clip.mp4, a dangling link) are: their
    // reader refuses them without opening them, so each is a failed input with the reason, counted and recorded
    // in the job's ledger instead of vanishing from the job.
    if (name.empty() || name[0] == '.' || it->is_directory(type_ec)) continue;
    const std::string p = path.string();
    if (has_extension_in(p, video_extensions()) || has_extension_in(p, image_extensions()))
      out.inputs.emplace_back(p, kind_of_found_file(p));
    else
      ++others;
  }
  if (ec) throw InputError("cannot read directory '" + uri + "': " + ec.message());
  if (out.inputs.empty())
    throw InputError("directory '" + uri + "' holds no video or image files" +
                     (others ? " (" + std::to_string(others) + " other file" + (others == 1 ? "" : "s") + ")" : "") +
                     "; looked for " + join_extensions() + " (not in subdirectories)");
  std::sort(out.inputs.begin(), out.inputs.end());
  return out;
}

ExpandedSource expand_glob(const std::string& pattern) {
  glob_t g{};
  struct Free {
    glob_t* g;
    ~Free() { globfree(g); }
  } free_later{&g};
  const int rc = glob(pattern.c_str(), 0, nullptr, &g);
  if (rc == GLOB_NOMATCH) throw InputError("'" + pattern + "' matches no files");
  if (rc == GLOB_ABORTED) throw InputError("cannot read the directories of '" + pattern + "'");
  if (rc != 0) throw InputError("cannot expand '" + pattern + "' (out of memory)");
  ExpandedSource out;
  out.job = true;
  for (std::size_t i = 0; i < g.gl_pathc; ++i) {
    const std::string p = g.gl_pathv[i];
    // Directories are not inputs; anything else is (a FIFO or device fails as an input, as in a directory job).
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) out.inputs.emplace_back(p, kind_of_found_file(p));
  }
  if (out.inputs.empty())
    throw InputError("'" + pattern + "' matches no files (only " + std::to_string(g.gl_pathc) + " director" +
                     (g.gl_pathc == 1 ? "y" : "ies") + ")");
  std::sort(out.inputs.begin(), out.inputs.end());
  return out;
}

// The last non-empty component of a path ("clips/" -> "clips"; "." -> the current directory's name).
std::string last_component(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // trailing slash
  std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") {
    std::error_code ec;
    const fs::path abs = fs::absolute(p, ec).lexically_normal();
    fs::path q = abs;
    if (!q.has_filename()) q = q.parent_path();
    name = q.filename().string();
  }
  return name;
}

}  // namespace

std::string extension_of(std::string_view path) {
  const auto slash = path.find_last_of('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const auto dot = name.find_last_of('.');
  if (dot == std::string_view::npos || dot == 0) return {};
  return lower(name.substr(dot));
}

const std::vector<std::string_view>& video_extensions() {
  static const std::vector<std::string_view> list{".mp4", ".mkv", ".avi",  ".mov",  ".webm", ".m4v", ".ts", ".mpg",
                                                  ".mpeg", ".flv", ".wmv", ".h264", ".264", ".h265", ".hevc", ".265"};
  return list;
}

const std::vector<std::string_view>& image_extensions() {
  static const std::vector<std::string_view> list{".png",  ".jpg",  ".jpeg", ".bmp", ".tif",
                                                  ".tiff", ".webp", ".pgm",  ".ppm"};
  return list;
}

bool starts_with_icase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lower(s.substr(0, prefix.size())) == prefix;
}

bool has_glob_chars(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

InputKind local_input_kind(std::string_view path) {
  if (!has_extension_in(path, image_extensions())) return InputKind::file;
  const auto slash = path.find_last_of('/');
  const std::string_view name = path.substr(slash == std::string_view::npos ? 0 : slash + 1);
  return find_printf_int(name).first != std::string_view::npos ? InputKind::image_sequence : InputKind::image;
}

bool names_local_job(const std::string& path) {
  std::error_code ec;
  return has_glob_chars(path) || fs::is_directory(path, ec);
}

ExpandedSource expand_local_path(const std::string& path) {
  const InputKind kind = local_input_kind(path);
  if (kind == InputKind::file || kind == InputKind::image) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!ec && fs::is_directory(st)) return expand_directory(path);
    // An existing file whose name holds glob characters is that file, not a pattern.
    if (!fs::exists(st) && has_glob_chars(path)) return expand_glob(path);
  }
  ExpandedSource out;
  out.kind = kind;
  out.inputs.emplace_back(path, kind);
  return out;
}

std::string sanitize_source_name(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    const char d = ok && static_cast<unsigned char>(c) < 128 ? c : '-';
    if (d == '-' && !out.empty() && out.back() == '-') continue;
    out += d;
  }
  const auto first = out.find_first_not_of("-._");
  if (first == std::string::npos) return {};
  out = out.substr(first, out.find_last_not_of("-._") - first + 1);
  if (out.size() > 64) out.resize(64);
  return out;
}

std::string local_source_name(const std::string& path) {
  if (local_input_kind(path) == InputKind::image_sequence) {
    const fs::path p(path);
    std::string stem = p.stem().string();
    const auto [at, len] = find_printf_int(stem);
    if (at != std::string::npos) stem.erase(at, len);
    std::string name = sanitize_source_name(stem);
    return name.empty() ? last_component(p.parent_path().empty() ? "." : p.parent_path().string()) : name;
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) return last_component(path);
  if (!fs::exists(path, ec) && has_glob_chars(path)) {
    // The deepest directory without glob characters: clips/cam*/x.mp4 -> clips.
    fs::path dir;
    for (const fs::path& part : fs::path(path).parent_path()) {
      if (has_glob_chars(part.string())) break;
      dir /= part;
    }
    return last_component(dir.empty() ? "." : dir.string());
  }
  const std::string stem = fs::path(path).stem().string();
  return stem.empty() ? last_component(path) : stem;
}

}  // namespace sluice
