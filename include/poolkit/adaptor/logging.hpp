// Deprecated: the header of logged<> (adaptor/logged.hpp), which was logging<> before the naming scheme of
// docs/concepts.md (Names). Kept for one release.
#pragma once

#include <poolkit/adaptor/logged.hpp>
