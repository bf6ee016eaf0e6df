// A stream-order oracle for any stream resource over simulated streams (host_events), shared by
// the tests and the fuzzer.
//
// Random traffic on a changing set of streams: allocations (out_of_memory is expected and
// counted: the upstream is meant to run out), record_use on other streams, frees on the
// allocating stream or another, streams catching up, and streams that end — their blocks freed on
// them, sometimes forget_stream(), then destroyed with their work still pending, as servers do
// (but those declared lasting, lasting_share, which only catch up).
// Oracle: when a block is handed to stream S, every earlier use of any byte of it by any stream
// must be complete once S's work completes (host_events propagates S's waits); live blocks never
// overlap. Choices come from `next(bound)`, a random engine in the tests and the input in the
// fuzzer, so a failing fuzz input replays exactly.
#pragma once

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace poolkit::test {

struct oracle_options {
    std::uint64_t seed = 1;
    std::size_t streams = 4;  // the most streams alive at once
    std::size_t steps = 6000;
    std::size_t largest = std::size_t{1} << 20;  // requests are mostly small, now and then up to this
    std::size_t check_every = 97;  // check_invariants() after this many steps, and at the end
    // Non-zero: stretches of this many steps in which one stream makes every call and does not end
    // (a program that left its other streams, whose work may still be pending), between stretches
    // as many steps long in which any stream may.
    std::size_t solo_steps = 0;
    // Non-zero: about one stream in this many is declared lasting (host_events::declare_lasting) and
    // never ends, so that a pool may ask about it during other streams' calls.
    std::size_t lasting_share = 0;
};

struct oracle_report {
    std::size_t checked = 0;  // earlier uses checked against a new owner
    std::size_t violations = 0;  // earlier uses not complete when the block was handed out again
    std::size_t overlaps = 0;  // live blocks sharing a byte
    std::size_t exhausted = 0;  // allocations that threw out_of_memory
    std::size_t streams_made = 0;
    std::string first_violation;

    [[nodiscard]] std::string describe() const {
        std::ostringstream out;
        out << "oracle: " << checked << " earlier uses checked, " << violations << " violations, " << overlaps << " overlaps, " << exhausted
            << " allocations out of memory, " << streams_made << " streams";
        if (!first_violation.empty()) out << "; first: " << first_violation;
        return out.str();
    }
};

// The pool under test behind virtual calls, so that the oracle's body is compiled once per binary
// whatever the pools (a test runs it over 18 of them). What a pool lacks is reported by has_*.
class oracle_pool {
public:
    virtual ~oracle_pool() = default;
    virtual void* allocate_async(std::size_t bytes, stream_ref stream) = 0;
    virtual void deallocate_async(void* pointer, std::size_t bytes, stream_ref stream) = 0;
    [[nodiscard]] virtual bool has_record_use() const = 0;
    virtual void record_use(void* pointer, stream_ref stream) = 0;
    [[nodiscard]] virtual bool has_forget_stream() const = 0;
    virtual void forget_stream(stream_ref stream) = 0;
    virtual void check_invariants() = 0;  // nothing where the pool has none
};

template <class Pool>
class oracle_pool_of final : public oracle_pool {
public:
    explicit oracle_pool_of(Pool& pool) : pool_(pool) {}
    void* allocate_async(std::size_t bytes, stream_ref stream) override { return pool_.allocate_async(bytes, default_alignment, stream); }
    void deallocate_async(void* pointer, std::size_t bytes, stream_ref stream) override {
        pool_.deallocate_async(pointer, bytes, default_alignment, stream);
    }
    [[nodiscard]] bool has_record_use() const override { return records_uses; }
    void record_use(void* pointer, stream_ref stream) override {
        if constexpr (records_uses) pool_.record_use(pointer, stream);
    }
    [[nodiscard]] bool has_forget_stream() const override { return forgets_streams; }
    void forget_stream(stream_ref stream) override {
        if constexpr (forgets_streams) pool_.forget_stream(stream);
    }
    void check_invariants() override {
        if constexpr (has_check_invariants<Pool>) pool_.check_invariants();
    }

private:
    static constexpr bool records_uses = requires(Pool& p, void* pointer, stream_ref stream) { p.record_use(pointer, stream); };
    static constexpr bool forgets_streams = requires(Pool& p, stream_ref stream) { p.forget_stream(stream); };
    Pool& pool_;
};

// `next(bound)`: a value in [0, bound). Returns false from `next` never; it decides every choice.
inline oracle_report stream_order_oracle(oracle_pool& pool, host_events& events, const oracle_options& options,
                                         const std::function<std::uint64_t(std::uint64_t)>& next) {
    struct use {
        stream_ref stream;
        std::uint64_t position;
    };
    struct range {
        std::uintptr_t begin, end;
        std::vector<use> uses;
    };
    struct live_block {
        void* pointer;
        std::size_t bytes;
        range history;
    };
    oracle_report report;
    std::vector<stream_ref> streams;
    const auto make = [&] {
        streams.push_back(events.make_stream());
        if (options.lasting_share != 0 && next(options.lasting_share) == 0) events.declare_lasting(streams.back());
        ++report.streams_made;
    };
    for (std::size_t i = 0; i < std::min<std::size_t>(options.streams, 3); ++i) make();
    std::vector<live_block> live;
    std::vector<range> retired;  // ranges freed, with the uses made of them
    std::map<std::uintptr_t, std::uintptr_t> live_ranges;  // begin -> end

    const auto free_block = [&](live_block block, stream_ref on) {
        block.history.uses.push_back({on, events.issued(on)});
        live_ranges.erase(block.history.begin);
        pool.deallocate_async(block.pointer, block.bytes, on);
        retired.push_back(std::move(block.history));
    };
    const auto pick_size = [&]() -> std::size_t {
        const std::uint64_t kind = next(16);
        if (kind == 0) return 1 + next(options.largest);
        if (kind < 4) return 1 + next(std::max<std::size_t>(options.largest / 8, 1));
        return 1 + next(16 * 1024);
    };

    for (std::size_t step = 0; step < options.steps; ++step) {
        const bool solo = options.solo_steps != 0 && (step / options.solo_steps) % 2 == 1;
        const stream_ref s = solo ? streams.front() : streams[next(streams.size())];
        const std::uint64_t action = next(100);
        if (live.empty() || action < 45) {
            const std::size_t bytes = pick_size();
            void* p = nullptr;
            try {
                p = pool.allocate_async(bytes, s);
            } catch (const out_of_memory&) {
                ++report.exhausted;
                continue;
            }
            const auto begin = reinterpret_cast<std::uintptr_t>(p);
            const auto after = live_ranges.upper_bound(begin);
            if ((after != live_ranges.end() && after->first < begin + bytes) ||
                (after != live_ranges.begin() && std::prev(after)->second > begin)) {
                ++report.overlaps;
            }
            live_ranges[begin] = begin + bytes;
            const std::uint64_t mine = events.submit(s);
            events.complete(s);  // S's work, and all it depends on, completes
            for (const range& old : retired) {
                if (old.end <= begin || old.begin >= begin + bytes) continue;
                for (const use& u : old.uses) {
                    ++report.checked;
                    if (events.completed(u.stream) >= u.position) continue;
                    if (report.violations++ == 0) {
                        std::ostringstream what;
                        what << "step " << step << ": " << bytes << " bytes at offset " << (begin - old.begin)
                             << " of a block whose earlier use was not complete";
                        report.first_violation = what.str();
                    }
                }
            }
            std::erase_if(retired, [&](const range& old) {
                return std::all_of(old.uses.begin(), old.uses.end(),
                                   [&](const use& u) { return events.completed(u.stream) >= u.position; });
            });
            live.push_back({p, bytes, {begin, begin + bytes, {{s, mine}}}});
        } else if (action < 55) {
            auto& block = live[next(live.size())];
            const stream_ref user = streams[next(streams.size())];
            if (pool.has_record_use()) {
                pool.record_use(block.pointer, user);
                block.history.uses.push_back({user, events.submit(user)});
            }
        } else if (action < 90) {
            const std::size_t index = next(live.size());
            live_block block = live[index];
            live[index] = live.back();
            live.pop_back();
            // Usually freed on the stream that allocated it, sometimes on another.
            const stream_ref freeing = solo || next(4) == 0 ? s : block.history.uses.front().stream;
            free_block(std::move(block), freeing);
        } else if (action < 97 || solo || events.lasting(s)) {
            events.complete(s);  // some stream catches up on its own (the lone stream and lasting ones do not end)
        } else {
            // s ends: what it used is freed on it, it may be forgotten, and it is destroyed with
            // its work still pending. A new stream may take its place, or two.
            std::vector<live_block> mine;
            std::erase_if(live, [&](live_block& block) {
                const bool used =
                    std::any_of(block.history.uses.begin(), block.history.uses.end(), [&](const use& u) { return u.stream == s; });
                if (used) mine.push_back(std::move(block));
                return used;
            });
            for (live_block& block : mine) free_block(std::move(block), s);
            events.submit(s);
            if (pool.has_forget_stream() && next(3) == 0) pool.forget_stream(s);
            events.destroy_stream(s);
            std::erase(streams, s);
            const std::size_t count = 1 + next(2);
            for (std::size_t i = 0; i < count && streams.size() < options.streams; ++i) make();
            if (streams.empty()) make();
        }
        if (step % options.check_every == 0) pool.check_invariants();
    }
    for (live_block& block : live) {
        const stream_ref allocating = block.history.uses.front().stream;
        free_block(std::move(block), allocating);
    }
    pool.check_invariants();
    return report;
}

// The same over any stream resource.
template <class Pool>
    requires(!std::derived_from<Pool, oracle_pool>)
oracle_report stream_order_oracle(Pool& pool, host_events& events, const oracle_options& options,
                                  const std::function<std::uint64_t(std::uint64_t)>& next) {
    oracle_pool_of<Pool> view(pool);
    return stream_order_oracle(view, events, options, next);
}

// The same, with choices from a random engine seeded by options.seed.
template <class Pool>
oracle_report stream_order_oracle(Pool& pool, host_events& events, const oracle_options& options) {
    std::mt19937_64 random(options.seed);
    return stream_order_oracle(pool, events, options, [&](std::uint64_t bound) { return bound == 0 ? 0 : random() % bound; });
}

}  // namespace poolkit::test
