// Deprecated: the header of recorded<> (adaptor/recorded.hpp), which was recording<> before the naming scheme of
// docs/concepts.md (Names). Kept for one release.
#pragma once

#include <poolkit/adaptor/recorded.hpp>
