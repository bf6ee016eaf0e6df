// Deprecated: the header of tracked<> (adaptor/tracked.hpp), which was tracking<> before the naming scheme of
// docs/concepts.md (Names). Kept for one release.
#pragma once

#include <poolkit/adaptor/tracked.hpp>
