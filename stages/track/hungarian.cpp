#include "stages/track/hungarian.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace sluice::track {

std::vector<int> assign_rows(const std::vector<double>& cost, int rows, int cols) {
  if (rows < 0 || cols < rows || cost.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols))
    throw std::invalid_argument("assign_rows: needs rows <= cols and rows * cols costs");
  const auto n = static_cast<std::size_t>(rows), m = static_cast<std::size_t>(cols);
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto a = [&](std::size_t i, std::size_t j) { return cost[(i - 1) * m + (j - 1)]; };  // 1-based
  // u, v: potentials of rows and columns; p[j]: the row column j holds (0: none); way[j]: the column before j
  // on the augmenting path. Column 0 is the virtual start of each path.
  std::vector<double> u(n + 1, 0.0), v(m + 1, 0.0), minv(m + 1);
  std::vector<std::size_t> p(m + 1, 0), way(m + 1, 0);
  std::vector<char> used(m + 1);
  for (std::size_t i = 1; i <= n; ++i) {
    p[0] = i;
    std::size_t j0 = 0;
    std::fill(minv.begin(), minv.end(), inf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[j0] = 1;
      const std::size_t i0 = p[j0];
      double delta = inf;
      std::size_t j1 = 0;
      for (std::size_t j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const double cur = a(i0, j) - u[i0] - v[j];
        if (cur < minv[j]) minv[j] = cur, way[j] = j0;
        if (minv[j] < delta) delta = minv[j], j1 = j;
      }
      if (j1 == 0) throw std::invalid_argument("assign_rows: a cost is not finite");
      for (std::size_t j = 0; j <= m; ++j) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {  // flip the path
      const std::size_t j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int> row_col(n, -1);
  for (std::size_t j = 1; j <= m; ++j)
    if (p[j] != 0) row_col[p[j] - 1] = static_cast<int>(j - 1);
  return row_col;
}

namespace {

struct Parts {  // union-find over rows 0..R-1 and columns R..R+C-1
  std::vector<int> parent;
  explicit Parts(int n) : parent(static_cast<std::size_t>(n)) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[static_cast<std::size_t>(x)] != x) {
      parent[static_cast<std::size_t>(x)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
      x = parent[static_cast<std::size_t>(x)];
    }
    return x;
  }
  void join(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) parent[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);
  }
};

}  // namespace

std::vector<std::pair<int, int>> match_below(const std::vector<double>& cost, int rows, int cols, double limit) {
  if (rows < 0 || cols < 0 || cost.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols))
    throw std::invalid_argument("match_below: needs rows * cols costs");
  std::vector<std::pair<int, int>> pairs;
  if (!std::isfinite(limit)) return pairs;
  const auto at = [&](int r, int c) { return cost[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)]; };
  // Allowed: below the limit, and cost - limit is a finite number.
  const auto allowed = [&](int r, int c) {
    const double x = at(r, c);
    return x < limit && std::isfinite(x - limit);
  };
  Parts parts(rows + cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      if (allowed(r, c)) parts.join(r, rows + c);
  std::vector<int> degree(static_cast<std::size_t>(rows + cols), 0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      if (allowed(r, c)) ++degree[static_cast<std::size_t>(r)], ++degree[static_cast<std::size_t>(rows + c)];
  // Each part with an allowed pair, in the order of its lowest member.
  std::vector<int> roots;
  for (int x = 0; x < rows + cols; ++x)
    if (degree[static_cast<std::size_t>(x)] > 0 && parts.find(x) == x) roots.push_back(x);
  for (const int root : roots) {
    std::vector<int> rs, cs;
    for (int r = 0; r < rows; ++r)
      if (degree[static_cast<std::size_t>(r)] > 0 && parts.find(r) == root) rs.push_back(r);
    for (int c = 0; c < cols; ++c)
      if (degree[static_cast<std::size_t>(rows + c)] > 0 && parts.find(rows + c) == root) cs.push_back(c);
    // The square matrix of lapjv's extend_cost, shifted by -limit: real pairs cost - limit (< 0), a row or a
    // column left alone 0 (its dummy partner), dummy to dummy 0, anything else `big`, more than all real gains
    // together, so that no optimum uses it (leaving everything alone, total 0, is always possible).
    const std::size_t nr = rs.size(), nc = cs.size(), n = nr + nc;
    double gains = 0;
    for (const int r : rs)
      for (const int c : cs)
        if (allowed(r, c)) gains += limit - at(r, c);
    const double big = gains + 1.0;
    std::vector<double> square(n * n, big);
    for (std::size_t i = 0; i < nr; ++i) {
      for (std::size_t j = 0; j < nc; ++j)
        if (allowed(rs[i], cs[j])) square[i * n + j] = at(rs[i], cs[j]) - limit;
      square[i * n + nc + i] = 0;
    }
    for (std::size_t j = 0; j < nc; ++j) {
      square[(nr + j) * n + j] = 0;
      for (std::size_t k = 0; k < nr; ++k) square[(nr + j) * n + nc + k] = 0;
    }
    const std::vector<int> chosen = assign_rows(square, static_cast<int>(n), static_cast<int>(n));
    for (std::size_t i = 0; i < nr; ++i) {
      const auto j = static_cast<std::size_t>(chosen[i]);
      if (j < nc && allowed(rs[i], cs[j])) pairs.emplace_back(rs[i], cs[j]);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

}  // namespace sluice::track
