#include "nn/cuda/algo_cache.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace sluice::nn::cuda {

const char* to_string(ConvMode m) {
  switch (m) {
    case ConvMode::fused: return "fused";
    case ConvMode::separate: return "separate";
    case ConvMode::gemm: return "gemm";
  }
  return "?";
}

namespace {
constexpr const char* kHeader = "# sluice nn/cuda convolution algorithms: key<TAB>fused|separate|gemm<TAB>cudnn algo";
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
    if (tab2 == std::string::npos)
      throw std::runtime_error(path_ + ":" + std::to_string(number) + ": expected key<TAB>mode<TAB>algorithm");
    const std::string mode = line.substr(tab1 + 1, tab2 - tab1 - 1);
    ConvChoice choice;
    if (mode == "fused") choice.mode = ConvMode::fused;
    else if (mode == "separate") choice.mode = ConvMode::separate;
    else if (mode == "gemm") choice.mode = ConvMode::gemm;
    else
      throw std::runtime_error(path_ + ":" + std::to_string(number) + ": mode '" + mode +
                               "' is not fused, separate or gemm");
    try {
      choice.algo = std::stoi(line.substr(tab2 + 1));
    } catch (const std::exception&) {
      throw std::runtime_error(path_ + ":" + std::to_string(number) + ": algorithm is not a number");
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

void AlgoCache::save() {
  if (path_.empty() || !changed_) return;
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write the algorithm cache " + tmp);
    out << kHeader << "\n";
    for (const auto& [key, choice] : entries_)
      out << key << '\t' << to_string(choice.mode) << '\t' << choice.algo << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write the algorithm cache " + tmp);
  }
  std::filesystem::rename(tmp, path_);
  changed_ = false;
}

}  // namespace sluice::nn::cuda
