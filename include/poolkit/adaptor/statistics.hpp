// Deprecated: the header of counted<> (adaptor/counted.hpp), which was statistics<> before the naming scheme of
// docs/concepts.md (Names). Kept for one release.
#pragma once

#include <poolkit/adaptor/counted.hpp>
