#pragma once
// Overflow-checked arithmetic for sizes and shapes that come from files (models, .npy, pipelines): a product or
// sum that does not fit is reported instead of wrapping into a small, wrong allocation or a division by zero.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>

namespace sluice {

// a * b, or nothing when the result does not fit in T.
template <typename T>
constexpr std::optional<T> checked_mul(T a, T b) noexcept {
  static_assert(std::is_integral_v<T>);
  T result{};
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// a + b, or nothing when the result does not fit in T.
template <typename T>
constexpr std::optional<T> checked_add(T a, T b) noexcept {
  static_assert(std::is_integral_v<T>);
  T result{};
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// a - b, or nothing when the result does not fit in T.
template <typename T>
constexpr std::optional<T> checked_sub(T a, T b) noexcept {
  static_assert(std::is_integral_v<T>);
  T result{};
  if (__builtin_sub_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// The product of non-negative extents (a shape), or nothing when one is negative or the product overflows T.
template <typename T, typename Range>
constexpr std::optional<T> checked_product(const Range& extents) noexcept {
  T product = 1;
  for (auto extent : extents) {
    if (extent < 0) return std::nullopt;
    const auto next = checked_mul<T>(product, static_cast<T>(extent));
    if (!next) return std::nullopt;
    product = *next;
  }
  return product;
}

}  // namespace sluice
