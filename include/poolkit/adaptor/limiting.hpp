// Deprecated: the header of limited<> (adaptor/limited.hpp), which was limiting<> before the naming scheme of
// docs/concepts.md (Names). Kept for one release.
#pragma once

#include <poolkit/adaptor/limited.hpp>
