/* The ABI is a header; this file only lets SwiftPM build the target and
 * checks at compile time that the tables keep their documented layout. */
#include "authbridge/plugin.h"

_Static_assert(offsetof(ab_host_api, size) == 0, "size must be the first field");
_Static_assert(offsetof(ab_plugin_vtable, size) == 0, "size must be the first field");
_Static_assert(offsetof(ab_plugin_info, magic) == 0, "magic must be the first field");

/* ABI 1.1 appended to ab_host_api, after every 1.0 entry (append-only). */
_Static_assert(offsetof(ab_host_api, fail) > offsetof(ab_host_api, is_cancelled), "1.1 entries follow 1.0's");
_Static_assert(offsetof(ab_host_api, query_value) > offsetof(ab_host_api, fail), "1.1 entries keep their order");
