// Deprecated: the header of retried_on_oom<> (adaptor/retried_on_oom.hpp), which was retry_on_oom<> before the naming scheme of
// docs/concepts.md (Names). Kept for one release.
#pragma once

#include <poolkit/adaptor/retried_on_oom.hpp>
