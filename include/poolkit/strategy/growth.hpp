// growth_policy: how large the next chunk is that a strategy takes from its upstream.
//
// Three shapes: fixed_step(bytes) takes chunks of `bytes`; geometric(factor) takes a chunk that
// multiplies what is reserved by `factor` (2: each chunk as large as all before it); as_needed(g)
// takes what the request needs, rounded up to `g`. Every shape takes at least what the request
// needs, the first chunk is at least the strategy's initial size, and no chunk takes the reserved
// total past the strategy's maximum. Plain arithmetic, constant time, no state.
#pragma once

#include <poolkit/core/alignment.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>

namespace poolkit {

struct growth_policy {
    enum class shape : unsigned char { fixed_step, geometric, as_needed };

    shape how = shape::geometric;
    std::size_t amount = 2;  // the step in bytes, the factor, or the granularity, as `how` says

    [[nodiscard]] static constexpr growth_policy fixed_step(std::size_t bytes) noexcept { return {shape::fixed_step, bytes}; }
    [[nodiscard]] static constexpr growth_policy geometric(std::size_t factor = 2) noexcept { return {shape::geometric, factor}; }
    [[nodiscard]] static constexpr growth_policy as_needed(std::size_t granularity = std::size_t{2} << 20) noexcept {
        return {shape::as_needed, granularity};
    }

    // Throws std::invalid_argument for an amount of 0. A factor of 1 grows as needed.
    void validate() const {
        if (amount == 0) throw std::invalid_argument("poolkit: growth_policy amount must be positive");
    }

    // Bytes of the next chunk for a request that needs `needed` bytes of fresh chunk, when
    // `reserved` bytes are taken already, the first chunk is `initial` bytes and the reserved total
    // may not pass `maximum`. The result is a multiple of `unit` (a power of two) and at least
    // `needed`; nothing when even `needed` does not fit under `maximum` or the sums overflow.
    [[nodiscard]] constexpr std::optional<std::size_t> next_chunk(std::size_t needed, std::size_t reserved, std::size_t initial,
                                                                  std::size_t maximum, std::size_t unit) const noexcept {
        const auto needed_rounded = checked_align_up(needed, unit);
        if (!needed_rounded || reserved > maximum || *needed_rounded > maximum - reserved) return std::nullopt;
        std::size_t proposal = 0;
        switch (how) {
            case shape::fixed_step:
                proposal = amount;
                break;
            case shape::geometric:
                proposal = amount > 1 && reserved <= std::numeric_limits<std::size_t>::max() / (amount - 1)
                               ? reserved * (amount - 1)
                               : std::numeric_limits<std::size_t>::max();
                break;
            case shape::as_needed:
                proposal = checked_round_up(needed, amount).value_or(0);
                break;
        }
        if (reserved == 0) proposal = std::max(proposal, initial);
        const std::size_t room = maximum - reserved;
        const std::size_t chunk = std::max(std::min(proposal, room), *needed_rounded);
        // Rounding up may pass the room; the room rounded down still holds what is needed.
        return std::min(checked_align_up(chunk, unit).value_or(room), static_cast<std::size_t>(align_down(room, unit)));
    }
};

}  // namespace poolkit
