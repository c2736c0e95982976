#pragma once
// Exact minimum-cost assignment (Kuhn-Munkres with potentials, the shortest-augmenting-path form of
// Jonker-Volgenant: O(rows^2 * cols)), and the partial matching a tracker needs on top of it. A Matcher keeps
// its scratch memory between calls, so that a tracker's frames allocate nothing once sizes have settled.
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace sluice::track {

// A pair a partial matching may use: row, column and its cost.
struct Candidate {
  int row, col;
  double cost;
};

class Matcher {
 public:
  // `cost` is rows x cols, row-major, every entry finite, rows <= cols. Returns for each row its column: every
  // row gets a distinct column and the sum of the chosen costs is minimal. Deterministic: the same matrix gives
  // the same answer (among equal-cost answers, the one the fixed scan order reaches first). Valid until the
  // next call.
  const std::vector<int>& assign_rows(std::span<const double> cost, int rows, int cols);

  // Partial matching with a cost limit (what lap.lapjv(extend_cost=True, cost_limit=limit) gives ByteTrack) on
  // the pairs of `candidates` (sorted by row then column, no pair twice; pairs not listed are forbidden):
  // a pair may be matched only when its cost < limit (a cost >= limit or NaN is forbidden too); each row and
  // column is matched at most once; the matching minimises the sum over matched pairs of (cost - limit), i.e.
  // every pair is worth matching and the total is as low as it can be. Rows and columns that share no allowed
  // pair are solved separately (connected parts of the bipartite graph), each as lapjv's extend_cost problem
  // over just its rows and columns, in their order: the cubic cost is paid per cluster of overlapping boxes.
  // A part whose costs are all distinct (its optimum unique, save for sums that tie exactly) is solved by
  // shortest augmenting paths over its allowed pairs alone, not the dense matrix: large boxes make parts of
  // ~100 tracks x ~100 boxes with a few allowed pairs each. The answer is the one the square problem of all of
  // them gives. Returns the pairs sorted by row; valid
  // until the next call.
  const std::vector<std::pair<int, int>>& match_below(std::span<const Candidate> candidates, int rows, int cols,
                                                      double limit);

 private:
  // A part whose costs are all distinct, by shortest augmenting paths over its allowed pairs (see the .cpp);
  // appends its pairs to pairs_.
  void match_sparse(std::span<const Candidate> edges, int rows, const int* member, std::size_t nr, std::size_t nc,
                    double limit);
  int find(int x);
  // A part solved without an assignment when its rows (or columns) each have a strictly cheapest pair, all
  // distinct (see the .cpp); appends them to pairs_ and returns true, or returns false and appends nothing.
  bool take_strict_minima(std::span<const Candidate> edges, int rows, const int* member, std::size_t nr,
                          std::size_t nc);

  // assign_rows: potentials, the path's columns, row per column.
  std::vector<double> u_, v_, minv_;
  std::vector<std::size_t> p_, way_;
  std::vector<char> used_;
  std::vector<int> row_col_;
  // match_below: the allowed pairs, union-find over rows then columns, parts and their members, one part's
  // cost matrix.
  std::vector<Candidate> allowed_, by_part_;
  std::vector<int> parent_, part_of_, local_, part_rows_, part_cols_, part_edges_, part_members_, members_, fill_;
  std::vector<double> costs_;  // a part's costs, sorted; then its cost matrix
  // take_strict_minima: per row (or column) of a part, its cheapest pair's cost and partner, tied or not.
  std::vector<double> best_cost_;
  std::vector<int> best_at_;
  std::vector<char> tie_, taken_;
  std::vector<std::pair<int, int>> pairs_;
  // match_sparse: each row's pairs (local column, cost - limit), potentials, the matching both ways, and the
  // search's distances, the columns it reached, those not settled yet and those settled.
  struct Arc {
    int col;
    double cost;
  };
  std::vector<std::size_t> sp_start_;
  std::vector<Arc> sp_adj_;
  std::vector<double> sp_u_, sp_v_, sp_dist_;
  std::vector<int> sp_col_of_, sp_row_of_, sp_way_, sp_seen_, sp_open_, sp_popped_;
  std::vector<char> sp_done_;
};

}  // namespace sluice::track
