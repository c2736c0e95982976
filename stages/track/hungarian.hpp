#pragma once
// Exact minimum-cost assignment (Kuhn-Munkres with potentials, the shortest-augmenting-path form of
// Jonker-Volgenant: O(rows^2 * cols)), and the partial matching a tracker needs on top of it.
#include <cstddef>
#include <utility>
#include <vector>

namespace sluice::track {

// `cost` is rows x cols, row-major, every entry finite, rows <= cols. Returns for each row its column: every
// row gets a distinct column and the sum of the chosen costs is minimal. Deterministic: the same matrix gives
// the same answer (among equal-cost answers, the one the fixed scan order reaches first).
std::vector<int> assign_rows(const std::vector<double>& cost, int rows, int cols);

// Partial matching with a cost limit (what lap.lapjv(extend_cost=True, cost_limit=limit) gives ByteTrack):
// a pair (r, c) may be matched only when cost < limit (an entry >= limit, NaN or infinite is forbidden); each
// row and column is matched at most once; the matching minimises the sum over matched pairs of (cost - limit),
// i.e. every pair is worth matching and the total is as low as it can be. Rows and columns that share no
// allowed pair are solved separately (connected parts of the bipartite graph), so the cubic cost is paid per
// cluster of overlapping boxes, not for the whole frame. Returns the pairs sorted by row.
std::vector<std::pair<int, int>> match_below(const std::vector<double>& cost, int rows, int cols, double limit);

}  // namespace sluice::track
