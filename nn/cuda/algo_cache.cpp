#include "nn/cuda/algo_cache.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace sluice::nn::cuda {

const char* to_string(ConvMode m) {
  switch (m) {
    case ConvMode::fused: return "fused";
    case ConvMode::separate: return "separate";
    case ConvMode::gemm: return "gemm";
    case ConvMode::depthwise: return "depthwise";
  }
  return "?";
}

namespace {
constexpr const char* kHeader = "# sluice nn/cuda convolution algorithms: key<TAB>fused|separate|gemm|depthwise<TAB>cudnn algo";
}

AlgoCache::AlgoCache(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  std::ifstream in(path_);
  if (!in) return;  // first run: nothing measured yet
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab1 = line.find('\t');
    const auto tab2 = tab1 == std::string::npos ? tab1 : line.find('\t', tab1 + 1);
    std::string fault;
    ConvChoice choice;
    if (tab2 == std::string::npos) {
      fault = "expected key<TAB>mode<TAB>algorithm";
    } else {
      const std::string mode = line.substr(tab1 + 1, tab2 - tab1 - 1);
      if (mode == "fused") choice.mode = ConvMode::fused;
      else if (mode == "separate") choice.mode = ConvMode::separate;
      else if (mode == "gemm") choice.mode = ConvMode::gemm;
      else if (mode == "depthwise") choice.mode = ConvMode::depthwise;
      else fault = "mode '" + mode + "' is not fused, separate, gemm or depthwise";
      try {
        choice.algo = std::stoi(line.substr(tab2 + 1));
      } catch (const std::exception&) {
        fault = "algorithm is not a number";
      }
    }
    if (!fault.empty()) {
      // A cache only saves time: a damaged one is measured again and rewritten, never a reason not to start.
      spdlog::warn("{}:{}: {}; ignoring the algorithm cache (convolutions are measured again)", path_, number, fault);
      entries_.clear();
      changed_ = true;
      return;
    }
    entries_[line.substr(0, tab1)] = choice;
  }
}

std::optional<ConvChoice> AlgoCache::find(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void AlgoCache::put(const std::string& key, ConvChoice choice) {
  entries_[key] = choice;
  changed_ = true;
}

bool AlgoCache::save() {
  if (path_.empty() || !changed_) return true;
  // Unique per writer: two engines (a reload builds the new pipeline before the old one ends) may save at once.
  static std::atomic<unsigned> writers{0};
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(writers++);
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (out) {
      out << kHeader << "\n";
      for (const auto& [key, choice] : entries_)
        out << key << '\t' << to_string(choice.mode) << '\t' << choice.algo << '\n';
      out.flush();
    }
    if (!out) {
      spdlog::warn("cannot write the algorithm cache {} ({}): the next start measures again", tmp, std::strerror(errno));
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      return false;
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, path_, error);
  if (error) {
    spdlog::warn("cannot replace the algorithm cache {}: {}", path_, error.message());
    std::filesystem::remove(tmp, error);
    return false;
  }
  changed_ = false;
  return true;
}

}  // namespace sluice::nn::cuda
