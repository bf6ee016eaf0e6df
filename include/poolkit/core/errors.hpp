// The errors poolkit throws.
//
// out_of_memory derives from std::bad_alloc, so code written for operator new handles it; its
// message says how much was asked and, where the thrower knows them, how much is live, reserved
// and cached. cuda_error carries a CUDA runtime error code without including CUDA headers.
#pragma once

#include <cstddef>
#include <cstdio>
#include <iterator>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace poolkit {

// What a resource knew about its memory when a request failed. Unknown figures stay empty.
struct memory_figures {
    std::size_t requested_bytes = 0;
    std::size_t alignment = 0;
    std::optional<std::size_t> live_bytes;  // handed to users and not yet freed
    std::optional<std::size_t> reserved_bytes;  // taken from the upstream
    std::optional<std::size_t> cached_bytes;  // reserved but free
    std::optional<std::size_t> limit_bytes;  // the capacity or cap that was hit
    std::optional<std::size_t> available_bytes;  // free on the device, as its driver reported it
    // Set where the address space ran out, not memory: the contiguous address space still free.
    std::optional<std::size_t> address_space_bytes;

    // Figures for a request of `bytes` aligned to `alignment`, everything else unknown.
    static memory_figures request(std::size_t bytes, std::size_t alignment) noexcept {
        memory_figures figures;
        figures.requested_bytes = bytes;
        figures.alignment = alignment;
        return figures;
    }

    // Figures for a request to a pool that holds `reserved` bytes, `live` of them handed out.
    static memory_figures held(std::size_t bytes, std::size_t alignment, std::size_t live, std::size_t reserved) noexcept {
        memory_figures figures = request(bytes, alignment);
        figures.live_bytes = live;
        figures.reserved_bytes = reserved;
        figures.cached_bytes = reserved > live ? reserved - live : 0;
        return figures;
    }
};

namespace detail {
inline std::string format_bytes(std::size_t bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double value = static_cast<double>(bytes);
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < std::size(units)) {
        value /= 1024.0;
        ++unit;
    }
    char text[64];
    if (unit == 0) {
        std::snprintf(text, sizeof text, "%zu B", bytes);
    } else {
        std::snprintf(text, sizeof text, "%.2f %s (%zu bytes)", value, units[unit], bytes);
    }
    return text;
}

inline std::string describe(const char* source, const memory_figures& figures) {
    std::string text = std::string("poolkit: ") + source + " is out of memory: asked for " + format_bytes(figures.requested_bytes);
    if (figures.alignment != 0) text += " aligned to " + std::to_string(figures.alignment);
    const std::pair<const char*, const std::optional<std::size_t>&> known[] = {
        {"live", figures.live_bytes},
        {"reserved", figures.reserved_bytes},
        {"cached", figures.cached_bytes},
        {"limit", figures.limit_bytes},
        {"available on the device", figures.available_bytes},
        {"address space exhausted: largest free span", figures.address_space_bytes},
    };
    for (const auto& [name, value] : known) {
        if (value) text += std::string("; ") + name + " " + format_bytes(*value);
    }
    return text;
}
}  // namespace detail

// Thrown when a request cannot be served. what() names the source and the figures.
class out_of_memory : public std::bad_alloc {
public:
    out_of_memory(const char* source, memory_figures figures) : figures_(figures), message_(detail::describe(source, figures)) {}

    [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
    [[nodiscard]] const memory_figures& figures() const noexcept { return figures_; }
    [[nodiscard]] std::size_t requested_bytes() const noexcept { return figures_.requested_bytes; }

private:
    memory_figures figures_;
    std::string message_;
};

// Thrown when a CUDA call fails for a reason other than exhaustion. code() is the cudaError_t.
class cuda_error : public std::runtime_error {
public:
    cuda_error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
    [[nodiscard]] int code() const noexcept { return code_; }

private:
    int code_;
};

}  // namespace poolkit
