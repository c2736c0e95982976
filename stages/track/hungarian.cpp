#include "stages/track/hungarian.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace sluice::track {

const std::vector<int>& Matcher::assign_rows(std::span<const double> cost, int rows, int cols) {
  if (rows < 0 || cols < rows || cost.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols))
    throw std::invalid_argument("assign_rows: needs rows <= cols and rows * cols costs");
  const auto n = static_cast<std::size_t>(rows), m = static_cast<std::size_t>(cols);
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto a = [&](std::size_t i, std::size_t j) { return cost[(i - 1) * m + (j - 1)]; };  // 1-based
  // u, v: potentials of rows and columns; p[j]: the row column j holds (0: none); way[j]: the column before j
  // on the augmenting path. Column 0 is the virtual start of each path.
  u_.assign(n + 1, 0.0);
  v_.assign(m + 1, 0.0);
  minv_.resize(m + 1);
  p_.assign(m + 1, 0);
  way_.assign(m + 1, 0);
  used_.resize(m + 1);
  for (std::size_t i = 1; i <= n; ++i) {
    p_[0] = i;
    std::size_t j0 = 0;
    std::fill(minv_.begin(), minv_.end(), inf);
    std::fill(used_.begin(), used_.end(), 0);
    do {
      used_[j0] = 1;
      const std::size_t i0 = p_[j0];
      double delta = inf;
      std::size_t j1 = 0;
      for (std::size_t j = 1; j <= m; ++j) {
        if (used_[j]) continue;
        const double cur = a(i0, j) - u_[i0] - v_[j];
        if (cur < minv_[j]) minv_[j] = cur, way_[j] = j0;
        if (minv_[j] < delta) delta = minv_[j], j1 = j;
      }
      if (j1 == 0) throw std::invalid_argument("assign_rows: a cost is not finite");
      for (std::size_t j = 0; j <= m; ++j) {
        if (used_[j]) {
          u_[p_[j]] += delta;
          v_[j] -= delta;
        } else {
          minv_[j] -= delta;
        }
      }
      j0 = j1;
    } while (p_[j0] != 0);
    do {  // flip the path
      const std::size_t j1 = way_[j0];
      p_[j0] = p_[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  row_col_.assign(n, -1);
  for (std::size_t j = 1; j <= m; ++j)
    if (p_[j] != 0) row_col_[p_[j] - 1] = static_cast<int>(j - 1);
  return row_col_;
}

int Matcher::find(int x) {  // union-find with path halving; a part's root is its lowest member
  while (parent_[static_cast<std::size_t>(x)] != x) {
    parent_[static_cast<std::size_t>(x)] = parent_[static_cast<std::size_t>(parent_[static_cast<std::size_t>(x)])];
    x = parent_[static_cast<std::size_t>(x)];
  }
  return x;
}

bool Matcher::take_strict_minima(std::span<const Candidate> edges, int rows, const int* member, std::size_t nr,
                                 std::size_t nc) {
  // Every matching costs at least the sum over its rows of each row's cheapest pair (all pairs gain, cost -
  // limit < 0, so a row left alone costs more than any of its pairs); when each row's cheapest pair is strictly
  // cheapest and they use different columns, that bound is reached by them alone: the only optimum, which the
  // assignment finds too. The same holds with columns for rows. Most parts of a frame (a few boxes near a
  // few tracks) are solved so, without the cubic assignment.
  const auto solve = [&](bool by_row) {
    const std::size_t n = by_row ? nr : nc, m = by_row ? nc : nr;
    best_cost_.assign(n, std::numeric_limits<double>::infinity());
    best_at_.assign(n, -1);
    tie_.assign(n, 0);
    for (const Candidate& e : edges) {
      const auto i = static_cast<std::size_t>(local_[static_cast<std::size_t>(by_row ? e.row : rows + e.col)]);
      if (e.cost < best_cost_[i]) best_cost_[i] = e.cost, best_at_[i] = by_row ? e.col : e.row, tie_[i] = 0;
      else if (e.cost == best_cost_[i]) tie_[i] = 1;
    }
    taken_.assign(m, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const auto j = static_cast<std::size_t>(local_[static_cast<std::size_t>(by_row ? rows + best_at_[i] : best_at_[i])]);
      if (tie_[i] || taken_[j]) return false;
      taken_[j] = 1;
    }
    for (std::size_t i = 0; i < n; ++i)
      if (by_row) pairs_.emplace_back(member[i], best_at_[i]);
      else pairs_.emplace_back(best_at_[i], member[nr + i] - rows);
    return true;
  };
  return solve(true) || solve(false);
}

void Matcher::match_sparse(std::span<const Candidate> edges, int rows, const int* member, std::size_t nr,
                           std::size_t nc, double limit) {
  // The same problem as the square's real rows (each row matched to one of its allowed columns at cost - limit,
  // or to a dummy column of its own at 0), solved by shortest augmenting paths (Dijkstra on reduced costs,
  // potentials u per row, v per column) over the allowed pairs alone: a few hundred pairs where the dense form
  // scans (rows x (rows + columns)) entries per step of a path. Starts from each row's cheapest pair, kept when
  // no earlier row took its column (a tight pair under u = that cost, v = 0; most rows keep it), so only the
  // rows left search. Its optimum is the dense form's where that is unique (the part's costs are distinct).
  const std::size_t m = nc + nr;  // columns: real ones, then row i's dummy at nc + i
  sp_start_.assign(nr + 1, 0);
  for (const Candidate& e : edges) ++sp_start_[static_cast<std::size_t>(local_[static_cast<std::size_t>(e.row)]) + 1];
  for (std::size_t i = 0; i < nr; ++i) sp_start_[i + 1] += sp_start_[i];
  sp_adj_.resize(edges.size());
  // edges come by row then column: each row's pairs are consecutive, in order
  for (std::size_t k = 0; k < edges.size(); ++k)
    sp_adj_[k] = {local_[static_cast<std::size_t>(rows + edges[k].col)], edges[k].cost - limit};
  sp_u_.assign(nr, 0.0);
  sp_v_.assign(m, 0.0);
  sp_col_of_.assign(nr, -1);
  sp_row_of_.assign(m, -1);
  sp_dist_.assign(m, std::numeric_limits<double>::infinity());
  sp_done_.assign(m, 0);
  sp_way_.assign(m, -1);
  for (std::size_t i = 0; i < nr; ++i) {
    std::size_t best = sp_start_[i];
    for (std::size_t k = sp_start_[i] + 1; k < sp_start_[i + 1]; ++k)
      if (sp_adj_[k].cost < sp_adj_[best].cost) best = k;
    sp_u_[i] = sp_adj_[best].cost;  // < 0: below the dummy's 0
    const auto j = static_cast<std::size_t>(sp_adj_[best].col);
    if (sp_row_of_[j] < 0) sp_row_of_[j] = static_cast<int>(i), sp_col_of_[i] = static_cast<int>(j);
  }
  for (std::size_t s = 0; s < nr; ++s) {
    if (sp_col_of_[s] >= 0) continue;
    // Dijkstra from row s; sp_dist_ of a column: the shortest reduced length of a path s .. row -> column.
    sp_seen_.clear();
    sp_open_.clear();
    const auto relax = [&](std::size_t r, double d) {
      const auto visit = [&](std::size_t j, double cost) {
        if (sp_done_[j]) return;
        const double nd = d + (cost - sp_u_[r] - sp_v_[j]);
        if (nd < sp_dist_[j]) {
          if (sp_dist_[j] == std::numeric_limits<double>::infinity())
            sp_seen_.push_back(static_cast<int>(j)), sp_open_.push_back(static_cast<int>(j));
          sp_dist_[j] = nd;
          sp_way_[j] = static_cast<int>(r);
        }
      };
      for (std::size_t k = sp_start_[r]; k < sp_start_[r + 1]; ++k)
        visit(static_cast<std::size_t>(sp_adj_[k].col), sp_adj_[k].cost);
      visit(nc + r, 0.0);
    };
    relax(s, 0.0);
    std::size_t end = m;
    double total = 0;
    sp_popped_.clear();
    while (!sp_open_.empty()) {
      // The nearest column reached and not settled (a scan: a search settles a few columns of a few dozen
      // reached, where a heap's pushes cost more).
      std::size_t at = 0;
      for (std::size_t q = 1; q < sp_open_.size(); ++q)
        if (sp_dist_[static_cast<std::size_t>(sp_open_[q])] < sp_dist_[static_cast<std::size_t>(sp_open_[at])]) at = q;
      const int jj = sp_open_[at];
      sp_open_[at] = sp_open_.back();
      sp_open_.pop_back();
      const auto j = static_cast<std::size_t>(jj);
      const double d = sp_dist_[j];
      sp_done_[j] = 1;
      sp_popped_.push_back(jj);
      if (sp_row_of_[j] < 0) {  // a free column: the path ends here
        end = j;
        total = d;
        break;
      }
      relax(static_cast<std::size_t>(sp_row_of_[j]), d);
    }
    if (end == m) throw std::logic_error("match_sparse: no augmenting path");  // s's dummy is always free
    // Potentials: every column settled before the end moves by total - its distance (reduced costs stay >= 0,
    // the path's pairs become tight).
    sp_u_[s] += total;
    for (const int jj : sp_popped_) {
      const auto j = static_cast<std::size_t>(jj);
      if (j == end) continue;
      const double shift = total - sp_dist_[j];
      sp_v_[j] -= shift;
      sp_u_[static_cast<std::size_t>(sp_row_of_[j])] += shift;
    }
    // Flip the path from the end back to s.
    for (std::size_t j = end;;) {
      const auto r = static_cast<std::size_t>(sp_way_[j]);
      const int previous = sp_col_of_[r];
      sp_row_of_[j] = static_cast<int>(r);
      sp_col_of_[r] = static_cast<int>(j);
      if (r == s) break;
      j = static_cast<std::size_t>(previous);
    }
    for (const int jj : sp_seen_) {
      sp_dist_[static_cast<std::size_t>(jj)] = std::numeric_limits<double>::infinity();
      sp_done_[static_cast<std::size_t>(jj)] = 0;
    }
  }
  for (std::size_t i = 0; i < nr; ++i) {
    const int j = sp_col_of_[i];
    if (j >= 0 && static_cast<std::size_t>(j) < nc)
      pairs_.emplace_back(member[i], member[nr + static_cast<std::size_t>(j)] - rows);
  }
}

const std::vector<std::pair<int, int>>& Matcher::match_below(std::span<const Candidate> candidates, int rows,
                                                             int cols, double limit) {
  pairs_.clear();
  if (rows < 0 || cols < 0) throw std::invalid_argument("match_below: needs rows, cols >= 0");
  // Allowed: below the limit, and cost - limit is a finite number.
  allowed_.clear();
  const Candidate* previous = nullptr;
  for (const Candidate& c : candidates) {
    if (c.row < 0 || c.row >= rows || c.col < 0 || c.col >= cols ||
        (previous && std::pair(previous->row, previous->col) >= std::pair(c.row, c.col)))
      throw std::invalid_argument("match_below: candidates must be distinct pairs within rows x cols, in order");
    previous = &c;
    if (c.cost < limit && std::isfinite(c.cost - limit)) allowed_.push_back(c);
  }
  if (allowed_.empty()) return pairs_;

  // Nodes: rows 0..rows-1, then columns rows..rows+cols-1. Parts are numbered in the order of their lowest
  // node; local_ is a node's place among its part's rows (or columns), in index order.
  const auto nodes = static_cast<std::size_t>(rows) + static_cast<std::size_t>(cols);
  parent_.resize(nodes);
  std::iota(parent_.begin(), parent_.end(), 0);
  local_.assign(nodes, -1);
  for (const Candidate& e : allowed_) {
    const int a = find(e.row), b = find(rows + e.col);
    if (a != b) parent_[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);
    local_[static_cast<std::size_t>(e.row)] = local_[static_cast<std::size_t>(rows + e.col)] = 0;
  }
  part_of_.assign(nodes, -1);
  part_rows_.clear();
  part_cols_.clear();
  for (std::size_t x = 0; x < nodes; ++x) {
    if (local_[x] < 0) continue;  // in no allowed pair
    const auto root = static_cast<std::size_t>(find(static_cast<int>(x)));
    if (root == x) {  // the lowest node of its part comes first
      part_of_[x] = static_cast<int>(part_rows_.size());
      part_rows_.push_back(0);
      part_cols_.push_back(0);
    } else {
      part_of_[x] = part_of_[root];
    }
    const auto p = static_cast<std::size_t>(part_of_[x]);
    local_[x] = x < static_cast<std::size_t>(rows) ? part_rows_[p]++ : part_cols_[p]++;
  }
  const std::size_t parts = part_rows_.size();
  // Each part's members (rows then columns, in index order) and allowed pairs (by row then column), by
  // counting sort.
  part_edges_.assign(parts + 1, 0);
  for (const Candidate& e : allowed_) ++part_edges_[static_cast<std::size_t>(part_of_[static_cast<std::size_t>(e.row)]) + 1];
  std::partial_sum(part_edges_.begin(), part_edges_.end(), part_edges_.begin());
  by_part_.resize(allowed_.size());
  part_members_.assign(parts + 1, 0);
  for (std::size_t p = 0; p < parts; ++p) part_members_[p + 1] = part_members_[p] + part_rows_[p] + part_cols_[p];
  members_.resize(static_cast<std::size_t>(part_members_[parts]));
  fill_.assign(parts, 0);
  for (const Candidate& e : allowed_) {
    const auto p = static_cast<std::size_t>(part_of_[static_cast<std::size_t>(e.row)]);
    by_part_[static_cast<std::size_t>(part_edges_[p] + fill_[p]++)] = e;
  }
  fill_.assign(parts, 0);
  for (std::size_t x = 0; x < nodes; ++x) {
    if (part_of_[x] < 0) continue;
    const auto p = static_cast<std::size_t>(part_of_[x]);
    members_[static_cast<std::size_t>(part_members_[p] + fill_[p]++)] = static_cast<int>(x);
  }

  for (std::size_t p = 0; p < parts; ++p) {
    const std::span<const Candidate> edges(by_part_.data() + part_edges_[p],
                                           static_cast<std::size_t>(part_edges_[p + 1] - part_edges_[p]));
    if (edges.size() == 1) {  // one row, one column: matching them gains, leaving them does not
      pairs_.emplace_back(edges[0].row, edges[0].col);
      continue;
    }
    const int* const member = members_.data() + part_members_[p];
    if (take_strict_minima(edges, rows, member, static_cast<std::size_t>(part_rows_[p]),
                           static_cast<std::size_t>(part_cols_[p])))
      continue;
    // lapjv's extend_cost, shifted by -limit: real pairs cost - limit (< 0), a row or a column left alone 0
    // (its dummy partner), dummy to dummy 0, anything else `big`, more than all real gains together, so that
    // no optimum uses it (leaving everything alone, total 0, is always possible). The square problem's dummy
    // rows (one per column) come after the real rows, and any assignment of the real rows completes at cost 0:
    // the real rows' optimum is found before them, and they move real rows only between optima of equal cost.
    // In crowded scenes they are 96% of the work, so they are left out when the part's costs are all distinct
    // (an optimum then is unique save for sums that tie exactly), and so is the dense matrix (match_sparse);
    // equal costs (duplicate boxes, whole-pixel boxes) keep the square and its choice among equal optima.
    const auto nr = static_cast<std::size_t>(part_rows_[p]), nc = static_cast<std::size_t>(part_cols_[p]);
    const std::size_t n = nr + nc;
    costs_.clear();
    double gains = 0;
    for (const Candidate& e : edges) gains += limit - e.cost, costs_.push_back(e.cost);
    std::sort(costs_.begin(), costs_.end());
    const bool square = std::adjacent_find(costs_.begin(), costs_.end()) != costs_.end();
    if (!square) {  // the optimum is unique: found on the allowed pairs alone (see match_sparse)
      match_sparse(edges, rows, member, nr, nc, limit);
      continue;
    }
    const std::size_t solved_rows = n;
    const double big = gains + 1.0;
    costs_.assign(solved_rows * n, big);
    for (const Candidate& e : edges)
      costs_[static_cast<std::size_t>(local_[static_cast<std::size_t>(e.row)]) * n +
             static_cast<std::size_t>(local_[static_cast<std::size_t>(rows + e.col)])] = e.cost - limit;
    for (std::size_t i = 0; i < nr; ++i) costs_[i * n + nc + i] = 0;
    for (std::size_t j = 0; j < nc; ++j) {
      costs_[(nr + j) * n + j] = 0;
      for (std::size_t k = 0; k < nr; ++k) costs_[(nr + j) * n + nc + k] = 0;
    }
    const std::vector<int>& chosen = assign_rows(costs_, static_cast<int>(solved_rows), static_cast<int>(n));
    for (std::size_t i = 0; i < nr; ++i) {
      const auto j = static_cast<std::size_t>(chosen[i]);
      if (j < nc && costs_[i * n + j] < 0) pairs_.emplace_back(member[i], member[nr + j] - rows);
    }
  }
  std::sort(pairs_.begin(), pairs_.end());
  return pairs_;
}

}  // namespace sluice::track
