"""What poolkit.torch and poolkit.cupy share: the statistics, summary and snapshot of the plugin's
pools, in the shapes of torch.cuda's functions. Each framework passes how it names the current
device."""
import collections
import pickle
import sys

from . import _plugin


def _trace_entry(event, frames):
    # One entry of PyTorch's device_traces.
    entry = {"action": event["action"], "addr": event["addr"], "size": event["size"], "stream": event["stream"],
             "time_us": event["time_us"], "frames": frames}
    if event["action"] == "oom":
        entry["device_free"] = event.get("device_free", 0)
    return entry


def _segment(device, segment, expandable, frames_at):
    # PyTorch's keys, in its order; every block keeps its address, size, requested size and state.
    return {
        "device": device,
        "address": segment["address"],
        "total_size": segment["total_size"],
        "allocated_size": segment["allocated_size"],
        "active_size": segment["active_size"],
        "requested_size": segment["requested_size"],
        "stream": segment["stream"],
        "segment_type": segment["segment_type"],
        "segment_pool_id": tuple(segment.get("segment_pool_id", (0, 0))),  # a CUDA graph's pool: (0, id)
        "is_expandable": expandable,
        "frames": [],
        "blocks": [{
            "address": block["address"],
            "size": block["size"],
            "requested_size": block["requested_size"],
            "state": block["state"],
            "frames": frames_at.get(block["address"], []) if block["state"] == "active_allocated" else [],
        } for block in segment["blocks"]],
    }


class Frontend:
    """The functions of one framework's module; `current_device()` gives the device an omitted
    argument means, `as_index(device)` turns the framework's device into an index."""

    FUNCTIONS = ("memory_stats", "memory_summary", "memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache",
                 "set_per_process_memory_fraction", "record_memory_history", "snapshot", "dump_snapshot")

    def __init__(self, current_device, as_index=int):
        self._current_device = current_device
        self._as_index = as_index
        # Who labels history events with call stacks (poolkit.torch's hooks extension): an object
        # with record_history(max_entries, python, cpp, frees) and history_frames(labels); None:
        # events carry no frames.
        self.stacks = None
        self._history = None  # what record_memory_history() was last asked: None (off), "all" or "state"

    def export(self, namespace):
        """Puts FUNCTIONS into a module's namespace (its globals())."""
        for name in self.FUNCTIONS:
            namespace[name] = getattr(self, name)

    def _device(self, device):
        return self._current_device() if device is None else self._as_index(device)

    def memory_stats(self, device=None):
        """torch.cuda.memory_stats() of poolkit's pool: the same keys where poolkit keeps the
        figure (allocated, active, requested and reserved bytes, allocations, segments, device
        allocs and frees, OOMs), sorted; empty for a device nothing was allocated on yet."""
        stats = _plugin.load().memory_stats(self._device(device))
        return collections.OrderedDict(sorted(stats.items()))

    def memory_summary(self, device=None, abbreviated=False):
        """The table of torch.cuda.memory_summary() for poolkit's pool, with its fragmentation."""
        del abbreviated  # one form only; accepted for torch.cuda's signature
        return _plugin.load().memory_summary(self._device(device))

    def memory_allocated(self, device=None):
        return self.memory_stats(device).get("allocated_bytes.all.current", 0)

    def max_memory_allocated(self, device=None):
        return self.memory_stats(device).get("allocated_bytes.all.peak", 0)

    def memory_reserved(self, device=None):
        return self.memory_stats(device).get("reserved_bytes.all.current", 0)

    def max_memory_reserved(self, device=None):
        return self.memory_stats(device).get("reserved_bytes.all.peak", 0)

    def reset_peak_memory_stats(self, device=None):
        _plugin.load().reset_peak_stats(self._device(device))

    def reset_accumulated_memory_stats(self, device=None):
        """The totals (*.allocated, *.freed, num_ooms, num_alloc_retries, num_device_alloc and
        num_device_free) restart at 0."""
        _plugin.load().reset_accumulated_stats(self._device(device))

    def empty_cache(self):
        """Returns every cached, wholly free chunk (caching) or mapped granule (expandable) of
        every device to the driver."""
        _plugin.load().empty_cache()

    def set_per_process_memory_fraction(self, fraction, device=None):
        """Caps what poolkit's pool of the device may reserve at `fraction` (0 to 1) of the
        device's memory: past it, the cache is returned first, then the request fails as out of
        memory. Below what is reserved now it only stops growth."""
        _plugin.load().set_memory_fraction(fraction, self._device(device))

    def record_memory_history(self, enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                              clear_history=False, **_ignored):
        """torch.cuda.memory._record_memory_history() for poolkit's pools (every device; `device`
        is accepted for its signature): enabled None stops and drops the history; "all" records
        alloc, free_requested, free_completed, segment and oom events into a ring of the newest
        `max_entries` per device, which snapshot() shows as "device_traces"; "state" records the
        same but snapshot() shows only the stacks of live blocks. context "all" labels allocs and
        frees with their call stack, "alloc" or "state" allocs only, None nothing; stacks
        "python" gathers Python frames, "all" Python and C++ ones. Stacks need a labeller
        (poolkit.torch's hooks); without one events carry no frames. Recording starts afresh at
        each call (clear_history is what it always does)."""
        del device, clear_history  # every device; each start drops what was recorded
        if enabled not in (None, False, "all", "state"):
            raise ValueError(f"enabled={enabled!r}: expected None, 'state' or 'all'")
        if context not in (None, "state", "alloc", "all") or stacks not in ("python", "all"):
            raise ValueError(f"context={context!r}, stacks={stacks!r}: expected context None, 'state', 'alloc' or 'all' "
                             "and stacks 'python' or 'all'")
        entries = 0 if enabled in (None, False) else max(int(max_entries), 1)
        if self.stacks is not None:
            labelled = context is not None
            self.stacks.record_history(entries, labelled, labelled and stacks == "all", context == "all")
        else:
            _plugin.load().record_history(entries)
        self._history = enabled or None

    def _traces(self, plugin, devices):
        # Each device's history as PyTorch's device_traces, and {address: frames} of the newest
        # alloc at each address (the stacks of live blocks).
        traces, frames_at = [], {}
        for device in range(devices):
            events = plugin.history(device) if self._history else []
            labels = [event.get("label", 0) for event in events]
            frames = self.stacks.history_frames(labels) if self.stacks is not None and any(labels) else [[] for _ in events]
            traces.append([_trace_entry(event, frames_of) for event, frames_of in zip(events, frames)])
            for entry in traces[-1]:
                if entry["action"] == "alloc":
                    frames_at[entry["addr"]] = entry["frames"]
        if self._history == "state":
            traces = [[] for _ in range(devices)]
        return traces, frames_at

    def snapshot(self):
        """torch.cuda.memory._snapshot()'s structure for poolkit's pools of every device in use:
        "segments" (device, address, total_size, allocated/active/requested sizes, stream,
        blocks with address, size, requested_size, state active_allocated, active_pending_free
        or inactive, and the frames of a live block's allocation where the history holds it),
        "device_traces" (each device's history while record_memory_history() records, else
        empty). For the expandable allocator each run of mapped granules is a segment with
        is_expandable True."""
        plugin = _plugin.load()
        expandable = plugin.allocator == "expandable"
        devices = plugin.device_count
        traces, frames_at = self._traces(plugin, devices)
        segments = [_segment(device, s, expandable, frames_at) for device in range(devices) for s in plugin.segments(device)]
        return {
            "segments": segments,
            "device_traces": traces,
            "allocator_settings": {"poolkit_allocator": plugin.allocator},
            "external_annotations": [],
        }

    def dump_snapshot(self, path):
        """Writes snapshot() as the pickle that PyTorch's viewer reads:
        python -m torch.cuda._memory_viz segment_plot PATH -o out.html (or stats PATH)."""
        with open(path, "wb") as f:
            pickle.dump(self.snapshot(), f)
