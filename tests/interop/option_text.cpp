#include <poolkit/interop/option_text.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <string>

using namespace poolkit;

TEST_CASE("set_option sets a field of caching_options by its name, from text") {
    caching_options options;
    set_option(options, "rounding", "1024");
    set_option(options, "power2_divisions", "4");
    set_option(options, "release_before_growth", "false");
    CHECK(options.rounding == 1024);
    CHECK(options.power2_divisions == 4);
    CHECK_FALSE(options.release_before_growth);
    set_option(options, "release_before_growth", "True");
    CHECK(options.release_before_growth);
    set_option(options, "large_chunk", "0");  // as needed, in 2 MiB steps
    CHECK(options.large_growth.how == growth_policy::shape::as_needed);
    CHECK(options.large_growth.amount == std::size_t{2} << 20);
    set_option(options, "large_chunk", "67108864");
    CHECK(options.large_growth.how == growth_policy::shape::fixed_step);
    CHECK(options.large_growth.amount == std::size_t{64} << 20);
}

TEST_CASE("set_option refuses what is not a value, and a value the options' rules refuse, changing nothing") {
    caching_options options;
    const caching_options before = options;
    for (const char* text : {"-4", "4x", "", " 4", "1e3", "18446744073709551616"}) {
        CAPTURE(text);
        CHECK_THROWS_WITH_AS(set_option(options, "power2_divisions", text),
                             ("poolkit: option power2_divisions=" + std::string(text) + " is not a number of at least 0").c_str(),
                             std::invalid_argument);
    }
    CHECK_THROWS_WITH_AS(set_option(options, "release_before_growth", "yes"),
                         "poolkit: option release_before_growth=yes is not true or false", std::invalid_argument);
    CHECK_THROWS_WITH_AS(set_option(options, "rounding", "3"),
                         "poolkit: option rounding=3 refused: caching_options.rounding must be a power of two", std::invalid_argument);
    CHECK(options.rounding == before.rounding);
    CHECK(options.power2_divisions == before.power2_divisions);
    CHECK(options.release_before_growth == before.release_before_growth);
}

TEST_CASE("set_option names the options there are when the name is not one of them") {
    caching_options options;
    CHECK_THROWS_WITH_AS(set_option(options, "cache_fraction", "0.1"),
                         ("poolkit: no option \"cache_fraction\" (the options are " + option_names<caching_options>() + ")").c_str(),
                         std::invalid_argument);
    CHECK(option_names<caching_options>().starts_with("rounding, power2_divisions, small_size, small_chunk, large_chunk"));
}

TEST_CASE("expandable_options are checked against the granule the pool will have") {
    expandable_options options;
    set_option(options, "cache_fraction", "0.05", std::size_t{2} << 20);
    CHECK(options.cache_fraction == doctest::Approx(0.05));
    set_option(options, "rounding", "1048576", std::size_t{2} << 20);
    CHECK_THROWS_AS(set_option(options, "rounding", "4194304", std::size_t{2} << 20), std::invalid_argument);  // above a granule
    CHECK(options.rounding == 1048576);
    CHECK_THROWS_AS(set_option(options, "mapping_bytes", "3145728", std::size_t{2} << 20), std::invalid_argument);
    set_option(options, "peak_slack", "inf", std::size_t{2} << 20);  // the default: nothing unmapped for new mappings
    CHECK(std::isinf(options.peak_slack));
    CHECK_THROWS_AS(set_option(options, "peak_slack", "nan", std::size_t{2} << 20), std::invalid_argument);
    CHECK_THROWS_AS(set_option(options, "peak_slack", "-0.5", std::size_t{2} << 20), std::invalid_argument);
    CHECK_THROWS_AS(set_option(options, "cache_fraction", "inf", std::size_t{2} << 20), std::invalid_argument);
    set_option(options, "candidates", "16", std::size_t{2} << 20);
    CHECK(options.candidates == 16);
    CHECK_THROWS_AS(set_option(options, "candidates", "-1", std::size_t{2} << 20), std::invalid_argument);
    set_option(options, "stitch", "true", std::size_t{2} << 20);
    CHECK(options.stitch);
    CHECK_THROWS_AS(set_option(options, "stitch", "2", std::size_t{2} << 20), std::invalid_argument);
    set_option(options, "small_in_old_holes", "true", std::size_t{2} << 20);
    CHECK(options.small_in_old_holes);
    set_option(options, "min_stitch_bytes", "67108864", std::size_t{2} << 20);
    CHECK(options.min_stitch_bytes == std::size_t{64} << 20);
    set_option(options, "max_stitches", "8", std::size_t{2} << 20);
    CHECK(options.max_stitches == 8);
    CHECK_THROWS_AS(set_option(options, "max_stitches", "0", std::size_t{2} << 20), std::invalid_argument);
    // Every field of the table can be set from its own text (a flag from "true").
    for (const auto& field : text_options<expandable_options>()) {
        const std::string name = field.name;
        CAPTURE(name);
        expandable_options fresh;
        const bool flag = name == "stitch" || name == "small_in_old_holes";
        CHECK_NOTHROW(set_option(fresh, name, flag ? "true" : "512", std::size_t{2} << 20));
    }
}
