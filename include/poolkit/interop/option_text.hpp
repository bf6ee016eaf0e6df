// Options by name, from text: "rounding=512" into a caching_options, as a plugin, a command line or
// an environment variable sets them.
//
//   text_options<Options>()                   the options' fields by name: caching_options and
//                                             expandable_options here; specialize it for one's own
//   option_names<Options>()                   "rounding, power2_divisions, ...", in that order
//   set_option(options, name, value, args...)  parses `value` for field `name`, then checks the
//                                             options as a whole (options.validate(args...)) and
//                                             only then changes `options`
//
// Numbers are decimal and at least 0 (std::from_chars: no sign, no spaces); flags are 1, true,
// True, 0, false or False. Every refusal is std::invalid_argument naming the option, the value and
// the rule, and leaves `options` as it was.
#pragma once

#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/expandable_options.hpp>

#include <charconv>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace poolkit {

// One field of Options, set from text. `name` is the field's C++ name.
template <class Options>
struct text_option {
    const char* name;
    void (*set)(Options& options, std::string_view name, std::string_view value);
};

template <class Number>
[[nodiscard]] Number parse_option_number(std::string_view name, std::string_view text) {
    Number value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    bool negative = false;
    if constexpr (std::is_signed_v<Number> || std::is_floating_point_v<Number>) negative = value < Number{};
    if (error != std::errc{} || end != text.data() + text.size() || negative) {
        throw std::invalid_argument("poolkit: option " + std::string(name) + "=" + std::string(text) + " is not a number of at least 0");
    }
    return value;
}

[[nodiscard]] inline bool parse_option_flag(std::string_view name, std::string_view text) {
    if (text == "1" || text == "true" || text == "True") return true;
    if (text == "0" || text == "false" || text == "False") return false;
    throw std::invalid_argument("poolkit: option " + std::string(name) + "=" + std::string(text) + " is not true or false");
}

// A field that is a number (or a flag): text_option{name, &set_field<&Options::field>}.
template <auto Field, class Options>
void set_field(Options& options, std::string_view name, std::string_view value) {
    using value_type = std::remove_cvref_t<decltype(options.*Field)>;
    if constexpr (std::is_same_v<value_type, bool>) {
        options.*Field = parse_option_flag(name, value);
    } else {
        options.*Field = parse_option_number<value_type>(name, value);
    }
}

// The fields of Options that text can set; specialize for one's own options.
template <class Options>
std::span<const text_option<Options>> text_options() = delete;

// caching_options (strategy/caching_pool.hpp says what each does). large_chunk is the large pool's
// growth step: 0 grows large chunks as needed in 2 MiB steps (PyTorch's rule).
template <>
inline std::span<const text_option<caching_options>> text_options<caching_options>() {
    using o = caching_options;
    static constexpr text_option<o> all[] = {
        {"rounding", &set_field<&o::rounding, o>},
        {"power2_divisions", &set_field<&o::power2_divisions, o>},
        {"small_size", &set_field<&o::small_size, o>},
        {"small_chunk", &set_field<&o::small_chunk, o>},
        {"large_chunk",
         [](o& options, std::string_view name, std::string_view value) {
             const auto bytes = parse_option_number<std::size_t>(name, value);
             options.large_growth = bytes == 0 ? growth_policy::as_needed(std::size_t{2} << 20) : growth_policy::fixed_step(bytes);
         }},
        {"max_split_size", &set_field<&o::max_split_size, o>},
        {"release_before_growth", &set_field<&o::release_before_growth, o>},
    };
    return all;
}

// expandable_options (strategy/expandable_options.hpp).
template <>
inline std::span<const text_option<expandable_options>> text_options<expandable_options>() {
    using o = expandable_options;
    static constexpr text_option<o> all[] = {
        {"span_bytes", &set_field<&o::span_bytes, o>},
        {"small_size", &set_field<&o::small_size, o>},
        {"small_span_bytes", &set_field<&o::small_span_bytes, o>},
        {"rounding", &set_field<&o::rounding, o>},
        {"cache_fraction", &set_field<&o::cache_fraction, o>},
        {"peak_slack", &set_field<&o::peak_slack, o>},
        {"max_peak_slack", &set_field<&o::max_peak_slack, o>},
        {"allocations_per_remap", &set_field<&o::allocations_per_remap, o>},
        {"mapping_bytes", &set_field<&o::mapping_bytes, o>},
        {"max_cached_bytes", &set_field<&o::max_cached_bytes, o>},
        {"candidates", &set_field<&o::candidates, o>},
        {"small_in_old_holes", &set_field<&o::small_in_old_holes, o>},
        {"stitch", &set_field<&o::stitch, o>},
        {"min_stitch_bytes", &set_field<&o::min_stitch_bytes, o>},
        {"max_stitches", &set_field<&o::max_stitches, o>},
    };
    return all;
}

template <class Options>
[[nodiscard]] std::string option_names() {
    std::string names;
    for (const text_option<Options>& option : text_options<Options>()) {
        names += names.empty() ? "" : ", ";
        names += option.name;
    }
    return names;
}

template <class Options, class... ValidateArgs>
void set_option(Options& options, std::string_view name, std::string_view value, const ValidateArgs&... validate_args) {
    for (const text_option<Options>& option : text_options<Options>()) {
        if (option.name != name) continue;
        Options changed = options;
        option.set(changed, name, value);
        if constexpr (requires { changed.validate(validate_args...); }) {
            try {
                changed.validate(validate_args...);
            } catch (const std::invalid_argument& rule) {
                std::string_view why = rule.what();
                if (why.starts_with("poolkit: ")) why.remove_prefix(std::string_view("poolkit: ").size());
                throw std::invalid_argument("poolkit: option " + std::string(name) + "=" + std::string(value) +
                                            " refused: " + std::string(why));
            }
        }
        options = changed;
        return;
    }
    throw std::invalid_argument("poolkit: no option \"" + std::string(name) + "\" (the options are " + option_names<Options>() + ")");
}

}  // namespace poolkit
